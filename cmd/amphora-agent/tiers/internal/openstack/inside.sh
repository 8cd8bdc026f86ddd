#!/usr/bin/env bash
# The first process of the cloud's PID namespace (cloud.sh up starts it
# in fresh mount, UTS, IPC and network namespaces): lays the tier's
# overlay over the cached root, gives it its own /proc, /sys, /run and a
# /dev without kvm, and becomes boot.sh inside it. Its death ends every
# process of the cloud.
set -euo pipefail
dir=$1 root=$2 here=$3
r=$dir/root
mkdir -p "$dir/upper/aa" "$dir/work" "$r"
# The cached root stays untouched: every write of this run lands in upper/.
mount -t overlay overlay -o "lowerdir=$root,upperdir=$dir/upper,workdir=$dir/work" "$r"
mount -t proc proc "$r/proc"
# Mounted from inside the network namespace: /sys/class/net is the cloud's.
mount -t sysfs sysfs "$r/sys"
mount -t tmpfs -o mode=755 tmpfs "$r/run"
mount -t tmpfs -o mode=755,size=64m tmpfs "$r/dev"
mknod -m 666 "$r/dev/null" c 1 3
mknod -m 666 "$r/dev/zero" c 1 5
mknod -m 666 "$r/dev/full" c 1 7
mknod -m 666 "$r/dev/random" c 1 8
mknod -m 666 "$r/dev/urandom" c 1 9
mknod -m 666 "$r/dev/tty" c 5 0
mkdir -p "$r/dev/pts" "$r/dev/shm" "$r/dev/net"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$r/dev/pts"
ln -s pts/ptmx "$r/dev/ptmx"
mount -t tmpfs tmpfs "$r/dev/shm"
# Taps for Open vSwitch's userspace datapath and QEMU; no /dev/kvm (it
# hangs on these hosts), so libvirt offers only TCG.
mknod -m 666 "$r/dev/net/tun" c 10 200
ln -s /proc/self/fd "$r/dev/fd"
hostname aa-openstack
cp "$here/boot.sh" "$here/tempest.sh" "$here/amphora-logs.sh" "$r/aa/"
# The images boot.sh uploads to Glance: the amphora image under test, the
# Python agent's to compare with, and the gate suite's member servers'.
for pair in "amphora:${AMPHORA_IMAGE:-}" "upstream-agent:${AMPHORA_UPSTREAM_IMAGE:-}" "member:${AMPHORA_MEMBER_IMAGE:-}"; do
	[ -n "${pair#*:}" ] || continue
	touch "$r/aa/${pair%%:*}.qcow2"
	mount --bind -o ro "${pair#*:}" "$r/aa/${pair%%:*}.qcow2"
done
# The Kubernetes tier (../kubernetes): its script, and kube-tools.sh's
# folder of binaries (the API server, the cloud controller manager).
if [ -n "${AMPHORA_KUBE_TOOLS:-}" ]; then
	cp "$here/../kubernetes/kube.sh" "$r/aa/"
	mkdir -p "$r/aa/kube-tools"
	mount --bind -o ro "$AMPHORA_KUBE_TOOLS" "$r/aa/kube-tools"
fi
exec chroot "$r" /bin/bash /aa/boot.sh
