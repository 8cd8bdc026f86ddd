#!/usr/bin/env bash
# Builds the Debian bookworm amphora base image the VM test tier boots:
# systemd, a kernel with IPVS, HAProxy, keepalived, ipvsadm, nftables,
# iproute2, qemu-guest-agent, netcat (the UDP health check), ping (PING
# monitors), rsyslog and logrotate (HAProxy's logs), with the settings upstream's image
# elements make. The agent itself is not in it: its package is installed
# at boot from a disk labelled amphora-pkg (see amphora-test-package), so
# a new build of the agent never rebuilds the base.
#
# Usage: build.sh [cache-dir]   (default /var/tmp/amphora-agent-image)
# Prints the folder holding base.qcow2, vmlinuz and initrd.img. The folder
# is named after a hash of this script: same inputs, same image, no build.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-${AMPHORA_IMAGE_CACHE:-/var/tmp/amphora-agent-image}}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=systemd-sysv,udev,dbus,linux-image-amd64,initramfs-tools,kmod,netbase,haproxy,keepalived,ipvsadm,nftables,iproute2,qemu-guest-agent,procps,iputils-ping,netcat-openbsd,rsyslog,logrotate
key=$(cat "$0" "$here"/files/* | sha256sum | cut -c1-16)
out=$cache/$key
if [ -f "$out/base.qcow2" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
	echo "$out"
	exit 0
fi
for tool in mmdebstrap mkfs.ext4 qemu-img; do
	command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (make deps installs it)" >&2; exit 1; }
done

mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
start=$(date +%s)

# Documentation, manuals and locales are not needed on an amphora.
mmdebstrap --variant=minbase --components=main --include="$packages" \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	"$suite" "$root" "deb $mirror $suite main" "deb $mirror-security $suite-security main" \
	>"$work/mmdebstrap.log" 2>&1 || { tail -30 "$work/mmdebstrap.log" >&2; exit 1; }

echo amphora >"$root/etc/hostname"
# The name resolves locally, as on any Debian install (upstream's images
# get it from cloud-init): keepalived looks it up at every start and
# `keepalived -t`, and with no DNS server reachable each lookup waited
# 10 s. The amphora resolves no other names, and the build host's
# resolver has no business in the image.
printf '127.0.1.1\tamphora\n' >>"$root/etc/hosts"
rm -f "$root/etc/resolv.conf"
: >"$root/etc/resolv.conf"
printf '/dev/vda / ext4 defaults,errors=remount-ro 0 1\n' >"$root/etc/fstab"
# No password login at all: tests reach the VM through qemu-guest-agent.
chroot "$root" passwd -l root >/dev/null

# The management NIC is the first PCI NIC (slot 3, as the harness and
# Nova place it); hot-plugged data-plane NICs are left alone for the
# agent, which moves them into the amphora-haproxy namespace.
mkdir -p "$root/etc/systemd/network"
cp "$here/files/10-management.network" "$root/etc/systemd/network/"

# As upstream's haproxy-octavia element: the packaged HAProxy and
# keepalived services stay off (the agent runs its own), the kernel is
# tuned for many connections, HAProxy's group comes from an include file.
mkdir -p "$root/etc/sysctl.d" "$root/var/lib/octavia"
cp "$here/files/60-amphora.conf" "$root/etc/sysctl.d/"
printf 'global\n    group nogroup\n' >"$root/var/lib/octavia/haproxy-default-user-group.conf"

# As upstream's amphora-agent element: rsyslog listens where Octavia's
# HAProxy configs send their logs. haproxy's package keeps them in
# /var/log/haproxy.log, rotated daily (its 49-haproxy.conf and logrotate
# file); the controller's 10-rsyslog.conf from the config drive forwards
# them.
cp "$here/files/55-octavia-socket.conf" "$root/etc/rsyslog.d/"

# Listener certificates live in RAM (upstream's certs-ramfs element): the
# package's var-lib-octavia-certs.mount, which the agent's unit requires.
cp "$here/files/amphora-test-package.service" "$root/etc/systemd/system/"
install -m 0755 "$here/files/amphora-test-package" "$root/usr/local/sbin/amphora-test-package"

chroot "$root" systemctl enable systemd-networkd amphora-test-package.service >/dev/null 2>&1
chroot "$root" systemctl disable haproxy.service keepalived.service >/dev/null 2>&1
chroot "$root" systemctl mask haproxy.service keepalived.service >/dev/null 2>&1

cp "$root"/boot/vmlinuz-* "$work/vmlinuz"
cp "$root"/boot/initrd.img-* "$work/initrd.img"
truncate -s 3G "$work/root.img"
mkfs.ext4 -q -F -L amphora -d "$root" "$work/root.img"
qemu-img convert -O qcow2 "$work/root.img" "$work/base.qcow2"
rm -rf "$root" "$work/root.img"

took=$(( $(date +%s) - start ))
size=$(du -h "$work/base.qcow2" | cut -f1)
echo "amphora base image: $size (base.qcow2), built in ${took}s" >"$work/build-info.txt"
cat "$work/build-info.txt" >&2
rm -rf "$out"
mv "$work" "$out"
trap - EXIT
echo "$out"
