#!/usr/bin/env bash
# Builds the member image of the real-OpenStack tier: the small Debian VM
# that octavia-tempest-plugin's traffic tests boot through Nova as a
# load balancer's member (upstream boots Cirros, which this machine cannot
# download) and set up over SSH: it copies test_server.bin and the
# member's certificates to /dev/shm with scp and starts the server with
# `sudo screen -d -m`. So the image boots under TCG in a small flavor
# with only what that needs: systemd, udev, systemd-networkd (eth0 by
# DHCP and router advertisements), OpenSSH (scp and SFTP), sudo, screen,
# iproute2, jq, and member-boot, which installs the config drive's key
# pair for the login user `debian`; a busybox initramfs; only the kernel
# modules it loads (member/, README.md in this folder).
#
# Usage: member-image.sh [cache-dir]   (default /var/tmp/amphora-agent-image)
# Prints the path of the qcow2 image, in a folder named after a hash of
# its inputs (this script, member/, and the disk builder it shares with
# the amphora image): same inputs, no build.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
images=$(cd "$here/../../../packaging/image" && pwd)
cache=${1:-${AMPHORA_IMAGE_CACHE:-/var/tmp/amphora-agent-image}}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=trixie
# linux-image-cloud-amd64: the kernel flavour for VMs, a fraction of the
# generic one's modules.
packages=systemd-sysv,udev,linux-image-cloud-amd64,initramfs-tools,busybox-static,kmod,grub-pc-bin,passwd,netbase,iproute2,openssh-server,sudo,screen,jq
# shellcheck source=../../../packaging/image/disk.sh
. "$images/disk.sh"
# shellcheck source=../root-cache.sh
. "$here/../root-cache.sh"

build() {
	root_cache member-image "$suite" "$cache" "$0" "$here"/member/* "$images/disk.sh"
	local start fs
	start=$(date +%s)
	fs=$work/fs
	# Left out besides documentation: udev's hardware database (13 MB,
	# in the initramfs too, which the BIOS reads a sector at a time; it
	# names keyboards and mice), glibc's character set converters (UTF-8
	# and ASCII are built in) and GRUB's tools but the one make_disk runs.
	mmdebstrap --variant=essential --components=main --include="$packages" \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/lib/udev/hwdb.d/*' --dpkgopt='path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*' \
		--dpkgopt='path-exclude=/usr/bin/grub-*' --dpkgopt='path-include=/usr/bin/grub-mkimage' \
		--customize-hook="\"$here/member/customize.sh\" \"\$1\"" \
		"$suite" "$fs" "deb $mirror $suite main" "deb $mirror-security $suite-security main" \
		>"$work/mmdebstrap.log" 2>&1 || { tail -30 "$work/mmdebstrap.log" >&2; exit 1; }
	mkdir "$work/root"
	DISK_COMPRESS=1 make_disk "$fs" "$work" "$work/root/member.qcow2" member "$here/member/grub.cfg" 1024
	echo "member-image.sh: Debian $suite, $(du -h "$work/root/member.qcow2" | cut -f1) (member.qcow2), built in $(($(date +%s) - start))s" |
		tee "$work/root/build-info.txt" >&2
	root_done
}

dir=$(build)
echo "$dir/member.qcow2"
