# Sourced by build.sh and bake.sh (and the OpenStack tier's member-image.sh):
# make_disk ROOT WORK OUT [LABEL GRUB_CFG MB] turns the root folder ROOT
# into a bootable qcow2 disk OUT, using WORK for scratch files; ROOT is
# consumed (removed once in the file system). The root file system is
# labelled LABEL (amphora), GRUB reads GRUB_CFG (files/grub.cfg) and the
# disk is MB MiB (2048); the amphora's defaults.
#
# GRUB for BIOS, without grub-install (which wants a block device): the
# image's own grub-mkimage makes core.img, which finds the root file
# system by its label; it goes into the gap before the partition, and
# GRUB's boot.img into the MBR, which loads it from sector 1. No loop
# device or mount: the file system is made from the folder (mkfs.ext4 -d)
# and put into the disk at its partition's offset.
make_disk() {
	local root=$1 work=$2 out=$3 images
	images=$(dirname "${BASH_SOURCE[0]}")
	local label=${4:-amphora} grub_cfg=${5:-$images/files/grub.cfg} disk_mb=${6:-2048}
	[ -e "$root/vmlinuz" ] || ln -s "$(cd "$root" && ls boot/vmlinuz-*)" "$root/vmlinuz"
	[ -e "$root/initrd.img" ] || ln -s "$(cd "$root" && ls boot/initrd.img-*)" "$root/initrd.img"
	mkdir -p "$root/boot/grub"
	cp -r "$root/usr/lib/grub/i386-pc" "$root/boot/grub/"
	cp "$grub_cfg" "$root/boot/grub/grub.cfg"
	printf 'search.fs_label %s root\nset prefix=($root)/boot/grub\n' "$label" >"$root/boot/grub/early.cfg"
	chroot "$root" grub-mkimage -O i386-pc -o /boot/grub/core.img -c /boot/grub/early.cfg -p /boot/grub \
		biosdisk part_msdos ext2 search_label normal linux configfile
	cp "$root/boot/grub/core.img" "$root/usr/lib/grub/i386-pc/boot.img" "$work/"

	# The amphora's 2 GB are as upstream's diskimage-create.sh makes it;
	# cloud-init grows the partition and the file system to the flavor's
	# disk at first boot.
	local core_sectors entry
	truncate -s $((disk_mb - 1))M "$work/root.img"
	mkfs.ext4 -q -F -L "$label" -d "$root" "$work/root.img"
	rm -rf "$root"
	truncate -s ${disk_mb}M "$work/disk.img"
	dd if="$work/boot.img" of="$work/disk.img" bs=440 count=1 conv=notrunc status=none
	core_sectors=$((($(stat -c %s "$work/core.img") + 511) / 512))
	[ "$core_sectors" -lt 2047 ] || { echo "make_disk: core.img does not fit before the partition" >&2; return 1; }
	dd if="$work/core.img" of="$work/disk.img" bs=512 seek=1 conv=notrunc status=none
	# One bootable Linux partition from 1 MiB (sector 2048) to the end;
	# the CHS fields say "use LBA".
	entry="\\x80\\xfe\\xff\\xff\\x83\\xfe\\xff\\xff$(le32 2048)$(le32 $((disk_mb * 2048 - 2048)))"
	printf "$entry" | dd of="$work/disk.img" bs=1 seek=446 conv=notrunc status=none
	printf '\x55\xaa' | dd of="$work/disk.img" bs=1 seek=510 conv=notrunc status=none
	dd if="$work/root.img" of="$work/disk.img" bs=1M seek=1 conv=notrunc,sparse status=none
	qemu-img convert ${DISK_COMPRESS:+-c} -O qcow2 "$work/disk.img" "$out"
	rm -f "$work/root.img" "$work/disk.img" "$work/boot.img" "$work/core.img"
}

le32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }
