#!/usr/bin/env bash
# Builds the Debian bookworm amphora base image the VM test tier boots:
# a 2 GB disk with an MBR partition table and GRUB (BIOS), systemd, a
# kernel with IPVS, cloud-init (ConfigDrive only), systemd-timesyncd,
# OpenSSH, HAProxy, keepalived, ipvsadm, nftables, iproute2,
# qemu-guest-agent, netcat (the UDP health check), ping (PING monitors),
# rsyslog and logrotate (HAProxy's logs), with the settings upstream's
# image elements make. The agent itself is not in it: its package is
# installed at boot from a disk labelled amphora-pkg (see
# amphora-test-package), so a new build of the agent never rebuilds the
# base.
#
# Usage: build.sh [cache-dir]   (default /var/tmp/amphora-agent-image)
# Prints the folder holding base.qcow2, vmlinuz and initrd.img. The folder
# is named after a hash of this script: same inputs, same image, no build.
# AMPHORA_IMAGE_VARIANT=upstream-agent builds, for the cloud tier only, an
# image with Debian's octavia-agent (Octavia's Python agent) in place of
# the package under test (variants/upstream-agent).
# No loop device or mount: the root file system is made from a folder
# (mkfs.ext4 -d) and put into the disk at its partition's offset.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-${AMPHORA_IMAGE_CACHE:-/var/tmp/amphora-agent-image}}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=systemd-sysv,udev,dbus,linux-image-amd64,initramfs-tools,kmod,netbase,haproxy,keepalived,ipvsadm,nftables,iproute2,qemu-guest-agent,procps,iputils-ping,netcat-openbsd,rsyslog,logrotate,grub-pc-bin,cloud-init,cloud-guest-utils,systemd-timesyncd,tzdata,openssh-server
variant=${AMPHORA_IMAGE_VARIANT:-}
hooks=()
case "$variant" in
"") ;;
upstream-agent) hooks=(--customize-hook="$here/variants/$variant/customize.sh \"\$1\"") ;;
*) echo "build.sh: unknown AMPHORA_IMAGE_VARIANT $variant" >&2; exit 1 ;;
esac
key=$(cat "$0" "$here"/files/* ${variant:+"$here/variants/$variant"/*} | sha256sum | cut -c1-16)
out=$cache/${variant:+$variant-}$key
cached() {
	if [ -f "$out/base.qcow2" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
		echo "$out"
		exit 0
	fi
}
cached
mkdir -p "$cache"
# make test runs the VM and cloud tiers side by side and both ask for the
# image: one builds it while the other waits here, then finds it cached.
exec 9>"$cache/.build-${variant:-base}.lock"
flock 9
cached
for tool in mmdebstrap mkfs.ext4 qemu-img; do
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

# As upstream's amphora-agent element: rsyslog listens where Octavia's
# HAProxy configs send their logs. haproxy's package keeps them in
# /var/log/haproxy.log, rotated daily (its 49-haproxy.conf and logrotate
# file); the controller's 10-rsyslog.conf from the config drive forwards
# them.
cp "$here/files/55-octavia-socket.conf" "$root/etc/rsyslog.d/"

# Listener certificates live in RAM (upstream's certs-ramfs element): the
# package's var-lib-octavia-certs.mount, which the agent's unit requires.
# A variant carries its own agent.
chroot "$root" systemctl enable systemd-networkd systemd-timesyncd >/dev/null 2>&1
if [ -z "$variant" ]; then
	cp "$here/files/amphora-test-package.service" "$root/etc/systemd/system/"
	install -m 0755 "$here/files/amphora-test-package" "$root/usr/local/sbin/amphora-test-package"
	chroot "$root" systemctl enable amphora-test-package.service >/dev/null 2>&1
fi
chroot "$root" systemctl disable haproxy.service keepalived.service >/dev/null 2>&1
chroot "$root" systemctl mask haproxy.service keepalived.service >/dev/null 2>&1
# e2scrub checks ext4 file systems on LVM, which the amphora has none of;
# its boot-time clean-up alone took 25-35 s of an emulated CPU.
chroot "$root" systemctl mask e2scrub_reap.service e2scrub_all.timer >/dev/null 2>&1

# GRUB for BIOS, without grub-install (which wants a block device): the
# image's own grub-mkimage makes core.img, which finds the root file
# system by its label; it goes into the gap before the partition, and
# GRUB's boot.img into the MBR, which loads it from sector 1.
[ -e "$root/vmlinuz" ] || ln -s "$(cd "$root" && ls boot/vmlinuz-*)" "$root/vmlinuz"
[ -e "$root/initrd.img" ] || ln -s "$(cd "$root" && ls boot/initrd.img-*)" "$root/initrd.img"
mkdir -p "$root/boot/grub"
cp -r "$root/usr/lib/grub/i386-pc" "$root/boot/grub/"
cp "$here/files/grub.cfg" "$root/boot/grub/grub.cfg"
printf 'search.fs_label amphora root\nset prefix=($root)/boot/grub\n' >"$root/boot/grub/early.cfg"
chroot "$root" grub-mkimage -O i386-pc -o /boot/grub/core.img -c /boot/grub/early.cfg -p /boot/grub \
	biosdisk part_msdos ext2 search_label normal linux configfile
cp "$root/boot/grub/core.img" "$root/usr/lib/grub/i386-pc/boot.img" "$work/"

cp "$root"/boot/vmlinuz-* "$work/vmlinuz"
cp "$root"/boot/initrd.img-* "$work/initrd.img"
# 2 GB, as upstream's diskimage-create.sh makes it; cloud-init grows the
# partition and the file system to the flavor's disk at first boot.
disk_mb=2048
truncate -s $((disk_mb - 1))M "$work/root.img"
mkfs.ext4 -q -F -L amphora -d "$root" "$work/root.img"
rm -rf "$root"
truncate -s ${disk_mb}M "$work/disk.img"
dd if="$work/boot.img" of="$work/disk.img" bs=440 count=1 conv=notrunc status=none
core_sectors=$(( ($(stat -c %s "$work/core.img") + 511) / 512 ))
[ "$core_sectors" -lt 2047 ] || { echo "build.sh: core.img does not fit before the partition" >&2; exit 1; }
dd if="$work/core.img" of="$work/disk.img" bs=512 seek=1 conv=notrunc status=none
# One bootable Linux partition from 1 MiB (sector 2048) to the end; the
# CHS fields say "use LBA".
le32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }
entry="\\x80\\xfe\\xff\\xff\\x83\\xfe\\xff\\xff$(le32 2048)$(le32 $((disk_mb * 2048 - 2048)))"
printf "$entry" | dd of="$work/disk.img" bs=1 seek=446 conv=notrunc status=none
printf '\x55\xaa' | dd of="$work/disk.img" bs=1 seek=510 conv=notrunc status=none
dd if="$work/root.img" of="$work/disk.img" bs=1M seek=1 conv=notrunc,sparse status=none
qemu-img convert -O qcow2 "$work/disk.img" "$work/base.qcow2"
rm -f "$work/root.img" "$work/disk.img"

took=$(( $(date +%s) - start ))
size=$(du -h "$work/base.qcow2" | cut -f1)
echo "amphora ${variant:-base} image: $size (base.qcow2), built in ${took}s" >"$work/build-info.txt"
cat "$work/build-info.txt" >&2
rm -rf "$out"
mv "$work" "$out"
trap - EXIT
echo "$out"
