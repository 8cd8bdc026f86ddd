#!/bin/sh
# The member image's settings, run by mmdebstrap as a customize hook with
# the image's root folder as $1 (its /proc and /dev mounted). See
# member-image.sh for what the image is for.
set -eu
root=$1
here=$(cd "$(dirname "$0")" && pwd)
run() { chroot "$root" "$@"; }

# The login user tempest's [validation] image_ssh_user names: bash as its
# shell, since tempest prefixes each command with `set -eu -o pipefail`,
# which dash refuses; sudo without a password; no password of its own
# ("*", not the "!" of a locked account), keys only.
run useradd -m -s /bin/bash -c 'tempest member' debian
run usermod -p '*' debian
printf 'debian ALL=(ALL) NOPASSWD:ALL\n' >"$root/etc/sudoers.d/debian"
chmod 440 "$root/etc/sudoers.d/debian"

# sshd's PAM session reads the locale file, which minimal roots lack:
# an empty one spares a warning at each login (the C locale stays).
: >"$root/etc/default/locale"

# sudo resolves the host's name at each call: it must resolve locally.
echo member >"$root/etc/hostname"
printf '127.0.1.1\tmember\n' >>"$root/etc/hosts"
printf 'LABEL=member / ext4 defaults 0 0\n' >"$root/etc/fstab"
# Each VM makes its own machine id (and so its own DHCP client id).
: >"$root/etc/machine-id"

# sshd: the ed25519 host key member-boot makes (the ones the package made
# in the build would be every VM's), keys only, and ssh-rsa signatures
# accepted besides rsa-sha2 for older clients of tempest's RSA key pairs.
rm -f "$root"/etc/ssh/ssh_host_*
cat >"$root/etc/ssh/sshd_config.d/member.conf" <<'CONF'
HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAcceptedAlgorithms +ssh-rsa
UseDNS no
CONF
install -m 755 "$here/member-boot" "$root/usr/local/sbin/member-boot"
cp "$here/member-boot.service" "$root/etc/systemd/system/"

# The first NIC by DHCP (Neutron's dnsmasq), and SLAAC or DHCPv6 as the
# subnet's router advertisements say; other NICs are left down.
printf '[Match]\nName=eth0\n\n[Network]\nDHCP=yes\nIPv6AcceptRA=yes\n' >"$root/etc/systemd/network/10-eth0.network"

run systemctl enable systemd-networkd member-boot.service >/dev/null 2>&1
# What a member does not use, each a unit less to start on an emulated
# CPU: logind (no D-Bus here, it would only fail), consoles nobody can
# log in on (no passwords), e2scrub (no LVM), the kernel's optional file
# systems (binfmt_misc's module is gone, below), module loads for them,
# utmp records, GRUB's boot-success record, the generator of network
# settings from the kernel command line.
run systemctl mask systemd-logind.service getty@.service serial-getty@.service getty-static.service \
	e2scrub_reap.service e2scrub_all.timer sys-kernel-config.mount sys-fs-fuse-connections.mount \
	proc-sys-fs-binfmt_misc.automount systemd-binfmt.service \
	dev-hugepages.mount dev-mqueue.mount sys-kernel-debug.mount sys-kernel-tracing.mount \
	modprobe@.service kmod-static-nodes.service systemd-update-utmp.service \
	systemd-update-utmp-runlevel.service grub-common.service systemd-network-generator.service >/dev/null 2>&1

# systemd's generators run at each start: those of features a member
# lacks (GPT auto-mounts, hibernation, TPM, SysV scripts, rc.local,
# offline updates, gettys, sshd on AF_VSOCK) are masked. sshd's config
# test before each start is dropped: the config is the image's.
mkdir -p "$root/etc/systemd/system-generators" "$root/etc/systemd/system/ssh.service.d"
for gen in gpt-auto hibernate-resume tpm2 sysv rc-local system-update getty ssh; do
	ln -sf /dev/null "$root/etc/systemd/system-generators/systemd-$gen-generator"
done
printf '[Service]\nExecStartPre=\n' >"$root/etc/systemd/system/ssh.service.d/member.conf"

# udev would load KVM's modules for the emulated CPU's flags: 1.5 MB of
# code no member runs.
printf 'blacklist kvm\nblacklist kvm_amd\nblacklist kvm_intel\n' >"$root/etc/modprobe.d/member-no-kvm.conf"

# The kernel modules a member loads: the drivers of the disk buses a
# cloud gives a guest (virtio, SCSI, SATA, IDE, NVMe), of the config
# drive (CD-ROM, ISO 9660, vfat), of the NIC, and virtio's entropy,
# balloon and console devices; ext4 and IPv6 are built in. modprobe's
# order for them and what they need, one path a line.
kver=$(ls "$root/usr/lib/modules")
boot_modules="virtio_blk virtio_scsi sd_mod ahci ata_piix ata_generic nvme sr_mod isofs vfat nls_cp437 nls_ascii virtio_net"
module_paths() {
	for module in "$@"; do
		run modprobe --show-depends --set-version "$kver" "$module"
	done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }'
}
# Every other module goes (20 MB, a quarter of the image): a member
# needs no file system, NIC or protocol beyond these.
# shellcheck disable=SC2086 # the lists split into names
keep=$(module_paths $boot_modules virtio_rng virtio_balloon virtio_console)
(cd "$root/usr" && find lib/modules/"$kver"/kernel -name '*.ko*') | while read -r path; do
	printf '%s\n' "$keep" | grep -qxF "/$path" || rm "$root/usr/$path"
done
find "$root/usr/lib/modules/$kver/kernel" -type d -empty -delete
run depmod "$kver"

# The initramfs: busybox and member/init with the boot modules,
# decompressed (busybox's insmod reads plain modules) and listed in
# modprobe's order. It replaces Debian's initrd from initramfs-tools.
ird=/tmp/member-initramfs
mkdir -p "$root$ird/bin" "$root$ird/dev" "$root$ird/proc" "$root$ird/sys" "$root$ird/root"
cp "$root/usr/bin/busybox" "$root$ird/bin/busybox"
ln -s busybox "$root$ird/bin/sh"
install -m 755 "$here/init" "$root$ird/init"
# shellcheck disable=SC2086
module_paths $boot_modules | while read -r path; do
	mkdir -p "$root$ird$(dirname "$path")"
	run busybox unxz -c "$path" >"$root$ird${path%.xz}"
	echo "${path%.xz}" >>"$root$ird/modules"
done
run sh -c "cd $ird && find . | busybox cpio -o -H newc 2>/dev/null | busybox gzip -9 >/boot/initrd.img-$kver"
rm -rf "${root:?}$ird"

# The caches a first boot would rebuild (ld.so's, udev's hardware
# database, the journal's catalog) are those the packages' triggers just
# made: marked up to date, as systemd-update-done would.
touch "$root/etc/.updated" "$root/var/.updated"
