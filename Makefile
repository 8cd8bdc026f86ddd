# amphora-agent — see README.md; the tiers: cmd/amphora-agent/tiers/README.md.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/amphora-agent/amphora-agent/cmd/amphora-agent/cli.Version=$(VERSION)
BIN := bin/amphora-agent
STATE ?= .state
PORT ?= 9443

# The Debian release of the amphora images (make image, test-vm,
# test-cloud): bookworm or trixie. bookworm is the default because the
# cloud tier's control plane is the host's Octavia 11 (bookworm's), the
# release it was made for; SUITE=trixie is the stack operators deploy
# now (HAProxy 3.0, keepalived 2.3, kernel 6.12).
SUITE ?= bookworm
export AMPHORA_IMAGE_SUITE := $(SUITE)

# Debian packages the system and interop tiers drive for real; mmdebstrap
# makes the chroot the package is installed in, and the amphora images
# (kept compressed with zstd); the member image's test logs in with
# OpenSSH and makes vfat config drives (dosfstools, mtools).
TEST_PACKAGES := jq haproxy keepalived ipvsadm iproute2 nftables iputils-ping python3-octavia mmdebstrap qemu-system-x86 qemu-utils xorriso zstd openssh-client dosfstools mtools

# diskimage-builder and what it runs, for the image built as upstream
# builds its own (make image-dib, test-vm-dib); diskimage-builder calls
# sudo even as root.
DIB_PACKAGES := python3-diskimage-builder debootstrap kpartx qemu-utils curl sudo

# Debian's Octavia control plane for the cloud tier (make test-cloud, run
# by make test); the preseed answers "no" to every configure question of
# Octavia's packages (the tier configures all of it itself).
CLOUD_PACKAGES := mariadb-server rabbitmq-server dnsmasq-base octavia-api octavia-worker octavia-health-manager octavia-housekeeping python3-openstackclient python3-octaviaclient
CLOUD_PRESEED := cmd/amphora-agent/tiers/internal/cloud/debconf-preseed.txt

.PHONY: build deb image image-dib run demo test test-unit test-system test-interop test-vm test-vm-dib test-cloud test-cloud-upgrade test-vm-cloud test-vm-share test-cloud-share bench-boot openstack-root member-image test-member-image test-openstack kube-tools test-kubernetes deps deps-cloud deps-dib vet bench fuzz soak flakes clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/amphora-agent

# bin/amphora-agent_<version>_amd64.deb for Debian bookworm; see
# cmd/amphora-agent/packaging/README.md.
deb: build
	cmd/amphora-agent/packaging/deb/build.sh $(BIN) '$(VERSION)' bin

bin/amphora-devenv: $(shell find cmd/amphora-devenv certs agent/fsutil -name '*.go')
	$(GO) build -o $@ ./cmd/amphora-devenv

# Dev certificates, config and state under $(STATE), API on 127.0.0.1:$(PORT).
run: build bin/amphora-devenv
	bin/amphora-devenv -state $(STATE) -port $(PORT)
	exec $(BIN) --config-file $(STATE)/amphora-agent.conf

# Installs what the tiers need when it is missing (needs root and apt).
deps:
	@missing=$$(for p in $(TEST_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

deps-dib:
	@missing=$$(for p in $(DIB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# Like deps, for the cloud tier's packages. Their postinst scripts do not
# start MariaDB or RabbitMQ where policy-rc.d forbids it (containers); on
# a host where they do start, the tier still uses its own instances in
# its own namespace.
deps-cloud:
	@missing=$$(for p in $(CLOUD_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		debconf-set-selections $(CLOUD_PRESEED) && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# The lint gate: gofmt, go vet and staticcheck without tags and under
# every build tag of the tree at once (TAGS, read from the //go:build
# lines: each tier's package has one tag, so they build side by side),
# and deadcode: a function the binary never calls is either a test
# helper, whose place is a _test.go file or a test-helper package
# (agent/health/healthtest, netns/netnstest, ...), or dead. The linters
# run pinned from the module proxy (go run pkg@version), so that nothing
# of theirs enters go.mod; staticcheck's //lint:ignore comments name
# their reason.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
DEADCODE := golang.org/x/tools/cmd/deadcode@v0.52.0
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt
TAGS = $(sort $(shell grep -rh --include='*.go' --exclude-dir=testdata --exclude-dir=.git '^//go:build ' . | sed 's|^//go:build ||'))
vet:
	@unformatted=$$($(GOFMT) -l .) || exit 1; \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted (gofmt -w them):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags '$(TAGS)' ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags '$(TAGS)' ./...
	@dead=$$($(GO) run $(DEADCODE) ./cmd/amphora-agent) || exit 1; \
	if [ -n "$$dead" ]; then echo "deadcode: functions the binary never calls (move test helpers to a _test.go file or a ...test package, delete the rest):"; echo "$$dead"; exit 1; fi

test: deps deps-cloud vet build test-unit test-system demo test-interop test-vm-cloud

# The VM and cloud tiers side by side: both mostly wait on QEMU (TCG, one
# vCPU per VM), so on two cores they finish well before one after the
# other would. Their lines interleave whole (both filter line-buffered);
# each test's name is on its result line, each log line names its file.
# The image build is shared (build.sh takes a lock). Each side then runs
# its share of the stack operators deploy today (Debian trixie: HAProxy
# 3.0, keepalived 2.3, Octavia 16): the VM tier's active/standby pair on
# the trixie image, and a create → serve → delete driven by Octavia 16
# on it. The rest of trixie's runs are opt-in (SUITE=trixie).
TRIXIE_VM_RUN := ^TestVMActiveStandby$$
TRIXIE_CLOUD_RUN := ^TestCloudCreateServeDelete$$
test-vm-cloud:
	$(MAKE) --no-print-directory -j2 test-vm-share test-cloud-share
test-vm-share:
	$(MAKE) --no-print-directory test-vm
	$(MAKE) --no-print-directory test-vm SUITE=trixie VM_RUN='$(TRIXIE_VM_RUN)'
test-cloud-share:
	$(MAKE) --no-print-directory test-cloud
	$(MAKE) --no-print-directory test-cloud SUITE=trixie CLOUD_RUN='$(TRIXIE_CLOUD_RUN)' CLOUD_SKIP=

test-unit:
	$(GO) test -race -count=1 ./...

# The system tier's package, and the system tests of other packages (their
# files under //go:build system: agent, topo, sctppeer), each test once:
# tagged.sh names the packages and the tests. The demo is a system test
# too; make test runs it on its own (demo).
TAGGED := cmd/amphora-agent/tiers/tagged.sh
test-system: build
	AMPHORA_AGENT_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -tags system -p 1 -run "$$($(TAGGED) run system)" -skip '^TestDemo$$' $$($(TAGGED) pkgs system)

# The whole job on this machine, told step by step (root): the test
# TestDemo plays the controller and the health manager against the real
# agent (see cmd/amphora-agent/tiers/system/README.md, "The demo").
demo: build
	@if [ "$$(id -u)" != 0 ]; then echo "demo: needs root (it makes network namespaces)"; exit 1; fi
	@set -o pipefail; AMPHORA_AGENT_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -tags system -timeout 2m -run '^TestDemo$$' -v ./cmd/amphora-agent/tiers/system/ 2>&1 | grep -v '^=== RUN'

# The interop tier's package and the interop tests of agent/health and
# agent/sysinfo, as test-system does.
test-interop: build
	AMPHORA_AGENT_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -tags interop -p 1 -run "$$($(TAGGED) run interop)" $$($(TAGGED) pkgs interop)

# Octavia's own control plane (Debian's API, worker, health manager and
# housekeeping with MariaDB and RabbitMQ) drives the cloud through the
# project's compute and network drivers
# (cmd/amphora-agent/tiers/cloud/README.md).
# make test runs it beside the VM tier. CLOUD_RUN picks tests (a -run
# pattern). The amphora VMs boot the image `make image` makes of the
# package built here, as Nova boots what an operator uploaded. With
# SUITE=trixie the control plane is trixie's Octavia 16, run from a root
# file system built once and cached (OCTAVIA_ROOT), beside the host's
# MariaDB and RabbitMQ; OCTAVIA_SUITE picks the control plane apart from
# the amphorae (OCTAVIA_SUITE=trixie: Octavia 16 with bookworm amphorae).
OCTAVIA_ROOT := cmd/amphora-agent/tiers/internal/cloud/octavia-root.sh
OCTAVIA_SUITE ?= $(SUITE)
CLOUD_TIMEOUT ?= 35m
CLOUD_RUN ?= Cloud
# The create → serve → delete path is in every full run of the scenarios;
# make test runs it alone on the trixie stack.
CLOUD_SKIP ?= ^TestCloudCreateServeDelete
BAKE := cmd/amphora-agent/packaging/image/bake.sh
IMAGE_BUILD := cmd/amphora-agent/packaging/image/build.sh
test-cloud: deps-cloud deb
	@if [ "$$(id -u)" != 0 ]; then echo "test-cloud: skipped: needs root (namespaces, bridges, VMs)"; exit 0; fi; \
	if ! command -v qemu-system-x86_64 >/dev/null; then echo "test-cloud: skipped: qemu-system-x86_64 is missing (make deps installs it)"; exit 0; fi; \
	image=$$($(BAKE) "$$(ls -t $(CURDIR)/bin/amphora-agent_*.deb | head -n1)" $(CURDIR)/bin) || exit 1; \
	octavia_root=; if [ "$(OCTAVIA_SUITE)" != bookworm ]; then octavia_root=$$($(OCTAVIA_ROOT) $(OCTAVIA_SUITE)) || exit 1; fi; \
	set -o pipefail; AMPHORA_IMAGE=$$image AMPHORA_OCTAVIA_ROOT=$$octavia_root \
		$(GO) test -count=1 -tags cloud -p 1 -timeout $(CLOUD_TIMEOUT) -run '$(value CLOUD_RUN)' -skip '$(value CLOUD_SKIP)' -v ./cmd/amphora-agent/tiers/cloud/ 2>&1 | grep --line-buffered -v '^=== '

# The root file system of the coming real-OpenStack tier (issue 36, not
# in make test): trixie's Keystone, Glance, Placement, Nova (libvirt,
# QEMU), Neutron (Open vSwitch), Octavia, tempest and
# octavia-tempest-plugin, MariaDB and RabbitMQ, installed and not
# configured; built once and cached (cmd/amphora-agent/tiers/internal/
# openstack/README.md). Prints its folder.
OPENSTACK_ROOT := cmd/amphora-agent/tiers/internal/openstack/openstack-root.sh
openstack-root:
	@if [ "$$(id -u)" != 0 ]; then echo "openstack-root: needs root (mmdebstrap, chroot)"; exit 1; fi; \
	$(OPENSTACK_ROOT) trixie

# The member image of the same tier: the small Debian VM that
# octavia-tempest-plugin's traffic tests boot as their web servers (in
# place of Cirros) and set up over SSH as user debian; built once and
# cached (same README). Prints the qcow2's path.
MEMBER_IMAGE := cmd/amphora-agent/tiers/internal/openstack/member-image.sh
member-image:
	@if [ "$$(id -u)" != 0 ]; then echo "member-image: needs root (mmdebstrap, chroot)"; exit 1; fi; \
	$(MEMBER_IMAGE)

# That image proven alone (opt-in, not in make test): TestMemberImage
# boots it under TCG with a Nova-like config drive (ISO 9660, then vfat)
# and does the plugin's steps over SSH with the plugin's own
# test_server.bin, logging in with tempest's own client too (both from
# the OpenStack root, built first if it is not cached). MEMBER_MEMORY
# sets the VM's MiB (default 256).
MEMBER_MEMORY ?=
TEST_SERVER_BIN := usr/lib/python3/dist-packages/octavia_tempest_plugin/contrib/test_server/test_server.bin
test-member-image: deps
	@if [ "$$(id -u)" != 0 ]; then echo "test-member-image: needs root (mmdebstrap, chroot)"; exit 1; fi; \
	image=$$($(MEMBER_IMAGE)) || exit 1; \
	root=$$($(OPENSTACK_ROOT) trixie) || exit 1; \
	set -o pipefail; AMPHORA_MEMBER_IMAGE=$$image AMPHORA_OPENSTACK_ROOT=$$root AMPHORA_TEST_SERVER=$$root/$(TEST_SERVER_BIN) AMPHORA_MEMBER_MEMORY_MB=$(MEMBER_MEMORY) \
		$(GO) test -count=1 -tags openstack -timeout 20m -run '^TestMember' -v ./cmd/amphora-agent/tiers/openstack/ 2>&1 | grep --line-buffered -v '^=== '

# The real-OpenStack tier (opt-in, not in make test; needs root): a
# whole OpenStack 2025.1 from Debian trixie in namespaces of its own
# (cmd/amphora-agent/tiers/openstack/README.md), with the trixie amphora
# image baked from the package built here in Glance, and the member image
# below for the gate suite's web servers. OPENSTACK_RUN picks
# the tests, OPENSTACK_TEMPEST the gate suite's (a regex of test ids),
# OPENSTACK_IMAGE the amphora image: ours, upstream (the Python agent's:
# build.sh's upstream-agent variant) or both (the gate suite on each in
# the same cloud), OPENSTACK_FIREWALL Neutron's security group driver
# (openvswitch, or iptables_hybrid: the guests' taps on Linux bridges).
OPENSTACK_RUN ?= OpenStack
OPENSTACK_FIREWALL ?= openvswitch
OPENSTACK_TEMPEST ?=
OPENSTACK_IMAGE ?= ours
OPENSTACK_TIMEOUT ?= 240m
test-openstack: deps deb
	@if [ "$$(id -u)" != 0 ]; then echo "test-openstack: needs root (namespaces, chroot, VMs)"; exit 1; fi; \
	root=$$($(OPENSTACK_ROOT) trixie) || exit 1; \
	image=$$(AMPHORA_IMAGE_SUITE=trixie $(BAKE) "$$(ls -t $(CURDIR)/bin/amphora-agent_*.deb | head -n1)" $(CURDIR)/bin) || exit 1; \
	member=$$($(MEMBER_IMAGE)) || exit 1; \
	upstream=; if [ "$(OPENSTACK_IMAGE)" != ours ]; then \
		upstream=$$(AMPHORA_IMAGE_SUITE=trixie AMPHORA_IMAGE_VARIANT=upstream-agent $(IMAGE_BUILD))/base.qcow2 || exit 1; fi; \
	set -o pipefail; AMPHORA_OPENSTACK_ROOT=$$root AMPHORA_IMAGE=$$image AMPHORA_UPSTREAM_IMAGE=$$upstream AMPHORA_MEMBER_IMAGE=$$member \
		OPENSTACK_TEMPEST='$(value OPENSTACK_TEMPEST)' OPENSTACK_IMAGE=$(OPENSTACK_IMAGE) OPENSTACK_FIREWALL=$(OPENSTACK_FIREWALL) \
		$(GO) test -count=1 -tags openstack -p 1 -timeout $(OPENSTACK_TIMEOUT) -run '$(value OPENSTACK_RUN)' -v ./cmd/amphora-agent/tiers/openstack/ 2>&1 | grep --line-buffered -v '^=== '

# The Kubernetes tier (opt-in, not in make test; needs root): the
# real-OpenStack tier's cloud with a cluster without kubelets in it
# (etcd, kube-apiserver, the real openstack-cloud-controller-manager)
# and Services of type LoadBalancer onto the amphorae
# (cmd/amphora-agent/tiers/openstack/README.md). Builds the two Kubernetes
# tools once (kube-tools.sh, cached beside the images). OPENSTACK_IMAGE
# picks the amphora image (ours or upstream), KUBERNETES_RUN the tests.
KUBE_TOOLS := cmd/amphora-agent/tiers/internal/kubernetes/kube-tools.sh
KUBERNETES_RUN ?= ^TestKubernetes
kube-tools:
	$(KUBE_TOOLS)

test-kubernetes: deps deb
	@if [ "$$(id -u)" != 0 ]; then echo "test-kubernetes: needs root (namespaces, chroot, VMs)"; exit 1; fi; \
	tools=$$(GO=$(GO) $(KUBE_TOOLS)) || exit 1; \
	root=$$($(OPENSTACK_ROOT) trixie) || exit 1; \
	image=$$(AMPHORA_IMAGE_SUITE=trixie $(BAKE) "$$(ls -t $(CURDIR)/bin/amphora-agent_*.deb | head -n1)" $(CURDIR)/bin) || exit 1; \
	upstream=; if [ "$(OPENSTACK_IMAGE)" != ours ]; then \
		upstream=$$(AMPHORA_IMAGE_SUITE=trixie AMPHORA_IMAGE_VARIANT=upstream-agent $(IMAGE_BUILD))/base.qcow2 || exit 1; fi; \
	set -o pipefail; AMPHORA_OPENSTACK_ROOT=$$root AMPHORA_IMAGE=$$image AMPHORA_UPSTREAM_IMAGE=$$upstream AMPHORA_KUBE_TOOLS=$$tools \
		OPENSTACK_IMAGE=$(OPENSTACK_IMAGE) \
		$(GO) test -count=1 -tags openstack -p 1 -timeout $(OPENSTACK_TIMEOUT) -run '$(value KUBERNETES_RUN)' -v ./cmd/amphora-agent/tiers/openstack/ 2>&1 | grep --line-buffered -v '^=== '

# Octavia's upgrade under a serving load balancer (opt-in,
# TestCloudUpgrade): the host's Octavia 11 with a bookworm amphora
# replaced by trixie's Octavia 16 on the same database, then an amphora
# failover onto the trixie image. Bakes both images.
test-cloud-upgrade: deps-cloud deb
	@if [ "$$(id -u)" != 0 ]; then echo "test-cloud-upgrade: needs root (namespaces, bridges, VMs)"; exit 1; fi; \
	deb=$$(ls -t $(CURDIR)/bin/amphora-agent_*.deb | head -n1); \
	old=$$(AMPHORA_IMAGE_SUITE=bookworm $(BAKE) "$$deb" $(CURDIR)/bin) || exit 1; \
	new=$$(AMPHORA_IMAGE_SUITE=trixie $(BAKE) "$$deb" $(CURDIR)/bin) || exit 1; \
	root=$$($(OCTAVIA_ROOT) trixie) || exit 1; \
	set -o pipefail; AMPHORA_IMAGE_SUITE=bookworm AMPHORA_IMAGE=$$old AMPHORA_UPGRADE_IMAGE=$$new AMPHORA_UPGRADE_ROOT=$$root \
		$(GO) test -count=1 -tags cloud -p 1 -timeout 60m -run '^TestCloudUpgrade$$' -v ./cmd/amphora-agent/tiers/cloud/ 2>&1 | grep --line-buffered -v '^=== '

# Boot to ready and memory, printed (TestVMBootToReady in the VM tier):
# our baked image and the Python agent's (build.sh's upstream-agent
# variant) powered on BOOT_RUNS times each in turns, with the median time
# from power-on to the API answering and to the first heartbeat,
# MemAvailable after boot and under 50 listeners, and systemd-analyze's
# critical chain. SUITE and VM_MEMORY apply.
BOOT_RUNS ?= 3
bench-boot: deb
	@if [ "$$(id -u)" != 0 ]; then echo "bench-boot: needs root (taps, namespaces, VMs)"; exit 1; fi; \
	image=$$($(BAKE) "$$(ls -t $(CURDIR)/bin/amphora-agent_*.deb | head -n1)" $(CURDIR)/bin) || exit 1; \
	set -o pipefail; AMPHORA_IMAGE=$$image AMPHORA_BOOT_RUNS=$(BOOT_RUNS) AMPHORA_VM_MEMORY_MB=$(VM_MEMORY) \
		$(GO) test -count=1 -tags vm -timeout 90m -run '^TestVMBootToReady$$' -v ./cmd/amphora-agent/tiers/vm/ 2>&1 | grep --line-buffered -v '^=== '

# The amphora image an operator uploads to Glance (root: it is made in a
# chroot): the Debian base of SUITE with the package built here installed,
# bin/amphora-x64-haproxy-debian-<suite>-<base key>-agent-<version>.qcow2.
# The base is cached by its inputs; the same package is not baked twice.
image: deb
	@$(BAKE) "$$(ls -t $(CURDIR)/bin/amphora-agent_*.deb | head -n1)" $(CURDIR)/bin

# The same from diskimage-builder with Octavia's own elements and the
# package's element (cmd/amphora-agent/packaging/image/dib.sh; root), as
# an operator with an image pipeline of their own builds it:
# bin/amphora-x64-haproxy-dib-debian-bookworm-agent-<version>.qcow2.
DIB := cmd/amphora-agent/packaging/image/dib.sh
image-dib: deps-dib deb
	@$(DIB) "$$(ls -t $(CURDIR)/bin/amphora-agent_*.deb | head -n1)" $(CURDIR)/bin

# That image booted in the VM tier (opt-in: the first run fetches a Debian
# root with debootstrap and Octavia's source): TestVMDIBImage. Built with
# the test-only guest agent the tier runs commands through, and kept in
# the image cache rather than bin/.
test-vm-dib: deps deps-dib deb
	@if [ "$$(id -u)" != 0 ]; then echo "test-vm-dib: needs root (debootstrap, loop devices, VMs)"; exit 1; fi; \
	image=$$(AMPHORA_DIB_TEST=1 $(DIB) "$$(ls -t $(CURDIR)/bin/amphora-agent_*.deb | head -n1)" /var/tmp/amphora-agent-image/dib) || exit 1; \
	set -o pipefail; AMPHORA_DIB_IMAGE=$$image \
		$(GO) test -count=1 -tags vm -timeout 30m -run '^TestVMDIBImage$$' -v ./cmd/amphora-agent/tiers/vm/ 2>&1 | grep --line-buffered -v '^=== '

# Amphora VMs under QEMU (TCG here): the base image is built once and
# cached by its inputs (cmd/amphora-agent/packaging/image/build.sh); the package
# under test is installed at boot. Each wait on a booting guest may take
# what Octavia's controller tolerates (10 minutes, vmBootWait in
# cmd/amphora-agent/tiers/vm/vm_test.go); a loaded host stretched the
# tier to about twice its 17 idle minutes, and 60m leaves room beside
# that for a few waits run long.
# AMPHORA_VM_POWER_CYCLES (environment) sets the power-loss test's count;
# 10 needs VM_TIMEOUT=90m. VM_MEMORY sets each guest's MiB (default 768;
# VM_RUN picks tests, a -run pattern).
VM_TIMEOUT ?= 60m
VM_RUN ?= .
VM_MEMORY ?=
test-vm: deb
	@if [ "$$(id -u)" != 0 ]; then echo "test-vm: skipped: needs root (taps, namespaces)"; exit 0; fi; \
	if ! command -v qemu-system-x86_64 >/dev/null; then echo "test-vm: skipped: qemu-system-x86_64 is missing (make deps installs it)"; exit 0; fi; \
	set -o pipefail; AMPHORA_AGENT_DEB=$$(ls -t $(CURDIR)/bin/amphora-agent_*.deb | head -n1) AMPHORA_VM_MEMORY_MB=$(VM_MEMORY) \
		$(GO) test -count=1 -tags vm -p 1 -timeout $(VM_TIMEOUT) -run '$(value VM_RUN)' -v ./cmd/amphora-agent/tiers/vm/ 2>&1 | grep --line-buffered -v '^=== '

# Speed and memory figures, printed, never asserted: the cost of one
# heartbeat (1 LB x 50 listeners x 200 members, `show stat` CSV to signed
# datagram, and each stage), then the bench tier's table
# (cmd/amphora-agent/tiers/bench/bench_test.go) against upstream's Python
# agent (Debian's python3-octavia, installed here when missing and
# possible) and HAProxy's idle floor; then the cost of a PROMETHEUS
# listener scrape (agent/metrics/promex/bench_test.go).
bench: build
	@set -o pipefail; out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; \
	for p in haproxy python3-octavia; do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "bench: installing$$missing"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } || echo "bench: could not install$$missing"; \
	fi; \
	$(GO) test -run '^$$' -bench 'BenchmarkHeartbeat' -benchmem -count=1 ./agent/health/ | tee "$$out/heartbeat-bench.txt" && \
	AMPHORA_BENCH_OUT="$$out" $(GO) test -count=1 -tags bench -run '^TestBench(Sample|Capacity)$$' ./agent/health/ >"$$out/log" 2>&1 && \
	AMPHORA_BENCH_OUT="$$out" AMPHORA_AGENT_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 15m -tags bench -run '^TestBench$$' ./cmd/amphora-agent/tiers/bench/ >>"$$out/log" 2>&1 \
		|| { cat "$$out/log" 2>/dev/null; exit 1; }; \
	AMPHORA_BENCH_OUT="$$out" $(GO) test -count=1 -timeout 10m -tags bench -run '^TestBenchScrape$$' ./agent/metrics/promex/ >>"$$out/log" 2>&1 \
		|| { cat "$$out/log" 2>/dev/null; exit 1; }; \
	echo; cat "$$out/table.txt"; echo; cat "$$out/metrics.txt"

# Every fuzz target (func FuzzX in a _test.go file), one at a time, for
# FUZZTIME each with FUZZPARALLEL workers. Their seed corpora (f.Add and
# testdata/fuzz/FuzzX/) already run in test-unit. A finding is written to
# <pkg>/testdata/fuzz/FuzzX/ and fails the run; a target that ends with Go
# 1.26's "context deadline exceeded" at the fuzztime boundary and wrote
# nothing is reported as a flake (go.dev/issue/75804), not a failure.
FUZZTIME ?= 20s
FUZZPARALLEL ?= 1
# Go minimizes every new interesting input for up to 60 s by default,
# which left FuzzWrap (zlib) with a dozen executions a minute.
FUZZMINIMIZETIME ?= 5s
fuzz:
	@passed=0; failed=0; flaked=0; log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	for file in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
		pkg=./$$(dirname "$${file#./}"); \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing\.F).*/\1/p' "$$file"); do \
			dir=$$pkg/testdata/fuzz/$$t; before=$$(ls "$$dir" 2>/dev/null | wc -l); start=$$(date +%s); \
			if $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) -parallel $(FUZZPARALLEL) "$$pkg" >"$$log" 2>&1; then \
				passed=$$((passed+1)); verdict=ok; \
			elif [ "$$(ls "$$dir" 2>/dev/null | wc -l)" = "$$before" ] && grep -q 'context deadline exceeded' "$$log"; then \
				flaked=$$((flaked+1)); verdict="flake (deadline race, nothing found)"; \
			else \
				failed=$$((failed+1)); verdict=FAIL; cat "$$log"; \
			fi; \
			execs=$$(grep -o 'execs: [0-9]*' "$$log" | tail -n1); \
			echo "fuzz $$pkg $$t: $$verdict, $$(($$(date +%s)-start))s, $${execs:-execs: ?}"; \
		done; \
	done; \
	echo "fuzz: $$passed passed, $$failed failed, $$flaked flaked"; \
	[ $$failed = 0 ]

# The agent against real HAProxy and keepalived for SOAK (default 20m, not
# part of make test, needs root): 1 s heartbeats, a loop of controller
# calls, a line of figures a minute, their slopes at the end (TestSoak,
# cmd/amphora-agent/tiers/soak/soak_test.go; see its README). Go
# durations add up when written one after the other, so the timeout
# "$(SOAK)10m" is SOAK plus 10 minutes for set-up and clean-up.
SOAK ?= 20m
soak: build
	@if [ "$$(id -u)" != 0 ]; then echo "soak: needs root (it makes network namespaces)"; exit 1; fi
	AMPHORA_SOAK=$(SOAK) AMPHORA_AGENT_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -tags soak -timeout $(SOAK)10m -run '^TestSoak$$' -v ./cmd/amphora-agent/tiers/soak/

# The flake hunt (not part of make test): the unit tier FLAKES_UNIT times
# (-race -shuffle=on) while a busy loop holds each core, then the system
# tier FLAKES_SYSTEM times (as test-system; needs root, skipped without).
# Prints the run counts and each test that failed at least once with its
# count and first failure's output (a package that failed to build,
# panicked or timed out counts as its own "-" test), and fails if any
# did. The busy loops end with each unit run, and by themselves after
# FLAKES_BUSY_MAX seconds or when the script is gone; FLAKES_LOGS=folder
# keeps each run's go test -json output. The logic is in
# cmd/amphora-agent/tiers/flakes.sh (it reads go test -json with jq).
FLAKES_UNIT ?= 20
FLAKES_SYSTEM ?= 3
flakes: build
	@GO='$(GO)' cmd/amphora-agent/tiers/flakes.sh $(FLAKES_UNIT) $(FLAKES_SYSTEM) $(CURDIR)/$(BIN)

clean:
	rm -rf bin
