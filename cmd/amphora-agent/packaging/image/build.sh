#!/usr/bin/env bash
# Builds the Debian amphora base image: a 2 GB disk with an MBR
# partition table and GRUB (BIOS), systemd, a kernel with IPVS, cloud-init
# (ConfigDrive only), systemd-timesyncd, OpenSSH, HAProxy, keepalived,
# ipvsadm, nftables, iproute2, qemu-guest-agent, netcat (the UDP health
# check), ping (PING monitors), rsyslog and logrotate (HAProxy's logs), with
# the settings upstream's image elements make, and an initramfs of the root
# disk's drivers only (files/initramfs-hook). The agent is not in it:
# bake.sh makes the image an operator uploads from it and the package; the
# VM tier boots it as it is and installs the package under test at boot
# from a disk labelled amphora-pkg (amphora-test-package), so a new build
# of the agent never rebuilds the base.
#
# Usage: build.sh [cache-dir]   (default /var/tmp/amphora-agent-image)
# AMPHORA_IMAGE_SUITE picks the Debian release: bookworm (the default:
# HAProxy 2.6, keepalived 2.2, kernel 6.1) or trixie (HAProxy 3.0,
# keepalived 2.3, kernel 6.12).
# Prints the folder holding base.qcow2, vmlinuz, initrd.img and, for
# bake.sh, root.tar.zst (the root before the test hook). The folder is
# named after a hash of the build's inputs: same inputs, same image, no
# build. AMPHORA_IMAGE_VARIANT=upstream-agent builds, for the cloud tier
# only, an image with Debian's octavia-agent (Octavia's Python agent) in
# place of the package under test (variants/upstream-agent).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=disk.sh
. "$here/disk.sh"
cache=${1:-${AMPHORA_IMAGE_CACHE:-/var/tmp/amphora-agent-image}}
suite=${AMPHORA_IMAGE_SUITE:-bookworm}
case "$suite" in
bookworm | trixie) ;;
*) echo "build.sh: unknown AMPHORA_IMAGE_SUITE $suite (bookworm or trixie)" >&2; exit 1 ;;
esac
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=systemd-sysv,udev,dbus,linux-image-amd64,initramfs-tools,kmod,netbase,haproxy,keepalived,ipvsadm,nftables,iproute2,qemu-guest-agent,procps,iputils-ping,netcat-openbsd,rsyslog,logrotate,grub-pc-bin,cloud-init,cloud-guest-utils,systemd-timesyncd,tzdata,openssh-server
variant=${AMPHORA_IMAGE_VARIANT:-}
hooks=()
case "$variant" in
"") hooks=(--customize-hook="install -m 0755 \"$here/files/initramfs-hook\" \"\$1/etc/initramfs-tools/hooks/amphora-root-disk\" && echo MODULES=list >\"\$1/etc/initramfs-tools/conf.d/amphora.conf\" && chroot \"\$1\" update-initramfs -u -k all") ;;
upstream-agent) hooks=(--customize-hook="$here/variants/$variant/customize.sh \"\$1\"") ;;
*) echo "build.sh: unknown AMPHORA_IMAGE_VARIANT $variant" >&2; exit 1 ;;
esac
# The variant puts the package's rsyslog socket in itself.
key=$({ echo "$suite"; cat "$0" "$here/disk.sh" "$here"/files/* ${variant:+"$here/variants/$variant"/* "$here/../deb/55-octavia-socket.conf"}; } |
	sha256sum | cut -c1-16)
out=$cache/${variant:+$variant-}$suite-$key
cached() {
	if [ -f "$out/base.qcow2" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ] &&
		{ [ -n "$variant" ] || [ -f "$out/root.tar.zst" ]; }; then
		echo "$out"
		exit 0
	fi
}
cached
mkdir -p "$cache"
# make test runs the VM and cloud tiers side by side and both ask for the
# image: one builds it while the other waits here, then finds it cached.
exec 9>"$cache/.build-${variant:-base}-$suite.lock"
flock 9
cached
for tool in mmdebstrap mkfs.ext4 qemu-img zstd; do
	command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (make deps installs it)" >&2; exit 1; }
done

work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
start=$(date +%s)

# Documentation, manuals and locales are not needed on an amphora.
mmdebstrap --variant=minbase --components=main --include="$packages" \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' "${hooks[@]}" \
	"$suite" "$root" "deb $mirror $suite main" "deb $mirror-security $suite-security main" \
	>"$work/mmdebstrap.log" 2>&1 || { tail -30 "$work/mmdebstrap.log" >&2; exit 1; }

echo amphora >"$root/etc/hostname"
# The name resolves locally, as on any Debian install: keepalived looks it
# up at every start and `keepalived -t`, and with no DNS server reachable
# each lookup waited 10 s. cloud-init rewrites both files from the
# metadata's hostname (manage_etc_hosts); this line serves a boot without
# it. As upstream's no-resolvconf element: the amphora resolves no other
# names, and the build host's resolver has no business in the image.
printf '127.0.1.1\tamphora\n' >>"$root/etc/hosts"
rm -f "$root/etc/resolv.conf"
: >"$root/etc/resolv.conf"
sed -i -e '/^hosts:/ s/ dns//' "$root/etc/nsswitch.conf"
printf 'LABEL=amphora / ext4 defaults,errors=remount-ro 0 1\n' >"$root/etc/fstab"
# No password login at all: tests reach the VM through qemu-guest-agent,
# an operator with the key from amp_ssh_key_name (cloud-init puts it in
# root's authorized_keys).
chroot "$root" passwd -l root >/dev/null

# The management NIC is the first NIC (eth0: kernel names, see grub.cfg),
# DHCPv4 or router advertisements, whatever PCI slot it sits in;
# hot-plugged data-plane NICs are left alone for the agent, which moves
# them into the amphora-haproxy namespace.
mkdir -p "$root/etc/systemd/network" "$root/etc/cloud/cloud.cfg.d"
cp "$here/files/10-management.network" "$root/etc/systemd/network/"
# cloud-init reads Nova's config drive only and runs only the modules
# Octavia's metadata and user data need (see the file).
cp "$here/files/99-amphora.cfg" "$root/etc/cloud/cloud.cfg.d/"

# As upstream's haproxy-octavia element: the packaged HAProxy and
# keepalived services stay off (the agent runs its own), the kernel is
# tuned for many connections, HAProxy's group comes from an include file.
mkdir -p "$root/etc/sysctl.d" "$root/var/lib/octavia"
cp "$here/files/60-amphora.conf" "$root/etc/sysctl.d/"
printf 'global\n    group nogroup\n' >"$root/var/lib/octavia/haproxy-default-user-group.conf"

# rsyslog's socket for Octavia's HAProxy configs (upstream's amphora-agent
# element ships it) comes with the package: 55-octavia-socket.conf.

# Listener certificates live in RAM (upstream's certs-ramfs element): the
# package's var-lib-octavia-certs.mount, which the agent's unit requires.
chroot "$root" systemctl enable systemd-networkd systemd-timesyncd >/dev/null 2>&1
chroot "$root" systemctl disable haproxy.service keepalived.service >/dev/null 2>&1
chroot "$root" systemctl mask haproxy.service keepalived.service >/dev/null 2>&1
# e2scrub checks ext4 file systems on LVM, which the amphora has none of;
# its boot-time clean-up alone took 25-35 s of an emulated CPU.
chroot "$root" systemctl mask e2scrub_reap.service e2scrub_all.timer >/dev/null 2>&1

if [ -z "$variant" ]; then
	# What bake.sh installs the package into: the root as it stands,
	# file capabilities and all.
	tar --numeric-owner --xattrs --xattrs-include='*' -C "$root" -cf - . | zstd -q -T0 -3 -o "$work/root.tar.zst"
	# The test hook: the package under test from a second disk at boot.
	cp "$here/files/amphora-test-package.service" "$root/etc/systemd/system/"
	install -m 0755 "$here/files/amphora-test-package" "$root/usr/local/sbin/amphora-test-package"
	chroot "$root" systemctl enable amphora-test-package.service >/dev/null 2>&1
fi

cp "$root"/boot/vmlinuz-* "$work/vmlinuz"
cp "$root"/boot/initrd.img-* "$work/initrd.img"
make_disk "$root" "$work" "$work/base.qcow2"

took=$(( $(date +%s) - start ))
size=$(du -h "$work/base.qcow2" | cut -f1)
echo "amphora ${variant:-base} image, Debian $suite: $size (base.qcow2), built in ${took}s" >"$work/build-info.txt"
# bake.sh names its image after it.
echo "$suite" >"$work/suite"
cat "$work/build-info.txt" >&2
rm -rf "$out"
mv "$work" "$out"
trap - EXIT
echo "$out"
