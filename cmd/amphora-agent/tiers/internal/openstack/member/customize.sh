#!/bin/sh
# The member image's settings, run by mmdebstrap as a customize hook with
# the image's root folder as $1 (its /proc and /dev mounted). See
# member-image.sh for what the image is for.
set -eu
root=$1
here=$(cd "$(dirname "$0")" && pwd)
images=$here/../../../../packaging/image
run() { chroot "$root" "$@"; }

# The login user tempest's [validation] image_ssh_user names: bash as its
# shell, since tempest prefixes each command with `set -eu -o pipefail`,
# which dash refuses; sudo without a password; no password of its own
# ("*", not the "!" of a locked account), keys only.
run useradd -m -s /bin/bash -c 'tempest member' debian
run usermod -p '*' debian
printf 'debian ALL=(ALL) NOPASSWD:ALL\n' >"$root/etc/sudoers.d/debian"
chmod 440 "$root/etc/sudoers.d/debian"

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
# systems, module loads for them, utmp records, GRUB's boot-success
# record, the generator of network settings from the kernel command line.
run systemctl mask systemd-logind.service getty@.service serial-getty@.service getty-static.service \
	e2scrub_reap.service e2scrub_all.timer sys-kernel-config.mount sys-fs-fuse-connections.mount \
	dev-hugepages.mount dev-mqueue.mount sys-kernel-debug.mount sys-kernel-tracing.mount \
	modprobe@.service kmod-static-nodes.service systemd-update-utmp.service \
	systemd-update-utmp-runlevel.service grub-common.service systemd-network-generator.service >/dev/null 2>&1

# The initramfs holds the root disk's drivers only, as the amphora's
# (the image's initramfs hook, shared).
install -m 755 "$images/files/initramfs-hook" "$root/etc/initramfs-tools/hooks/member-root-disk"
echo MODULES=list >"$root/etc/initramfs-tools/conf.d/member.conf"
run update-initramfs -u -k all >/dev/null
