#!/usr/bin/env bash
# Builds an amphora image as upstream does, with diskimage-builder and
# Octavia's own elements, the package in place of upstream's amphora-agent
# element (elements/amphora-agent-deb): the path an operator with an image
# pipeline of their own takes. Octavia's elements come from Debian's
# source of octavia 11.0.0 (the controller the tiers run), fetched from
# the Debian mirror once, checked against its SHA-256 and cached.
#
# On a host whose kernel has no device-mapper, which diskimage-builder's
# kpartx needs for the partitions, the build runs in a mount and PID
# namespace of its own where no-device-mapper/kpartx (and dmsetup) stand
# in: the loop device's own partitions under the names
# diskimage-builder expects (see there); with device-mapper it runs as
# it is.
#
# Usage: dib.sh DEB OUTDIR   (root: debootstrap, loop devices, chroot)
# Prints OUTDIR/amphora-x64-haproxy-dib-debian-bookworm-agent-<version>.qcow2
# (an image of that name is kept; earlier ones are replaced); the last
# build's log stays in the cache as dib.log (dib-failed.log if it failed).
# DEBIAN_MIRROR overrides the mirror; AMPHORA_IMAGE_CACHE the cache;
# AMPHORA_DIB_TEST=1 adds the test-only element amphora-test-guest-agent
# (the VM tier's way in) and "-test" to the name; AMPHORA_DIB_TIMEOUT
# bounds the build (default 60m).
set -euo pipefail

die() {
	echo "dib.sh: $*" >&2
	exit 1
}
[ $# -eq 2 ] || die "usage: dib.sh DEB OUTDIR"
deb=$(realpath "$1") outdir=$(realpath -m "$2")
[ -f "$deb" ] || die "no package $deb (make deb builds it)"
here=$(cd "$(dirname "$0")" && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${AMPHORA_IMAGE_CACHE:-/var/tmp/amphora-agent-image}
for tool in disk-image-create debootstrap qemu-img curl sudo kpartx; do
	command -v "$tool" >/dev/null || die "$tool is missing (make deps-dib installs it)"
done

octavia=11.0.0
octavia_sha256=a98db873c2c52602d24e4e5e9ceba58ae7f0db7d5e9ec26470a23ea1677a3e31
elements=$cache/octavia-$octavia-elements
if [ ! -d "$elements" ]; then
	mkdir -p "$cache"
	tarball=$(mktemp "$cache/octavia.XXXXXX")
	trap 'rm -f "$tarball"' EXIT
	curl -fsS -o "$tarball" "$mirror/pool/main/o/octavia/octavia_$octavia.orig.tar.xz"
	echo "$octavia_sha256  $tarball" | sha256sum -c --quiet - || die "octavia_$octavia.orig.tar.xz: checksum mismatch"
	tmp=$(mktemp -d "$cache/octavia-elements.XXXXXX")
	tar -C "$tmp" -xJf "$tarball" --strip-components=1 --wildcards '*/elements/*'
	mv "$tmp/elements" "$elements"
	rmdir "$tmp"
	rm -f "$tarball"
	trap - EXIT
fi

version=$(dpkg-deb -f "$deb" Version)
[[ $version =~ ^[0-9A-Za-z.~+:-]+$ ]] || die "unexpected package version $version"
name=amphora-x64-haproxy-dib-debian-bookworm-agent-$version
extra=()
if [ -n "${AMPHORA_DIB_TEST:-}" ]; then
	name+=-test
	extra=(amphora-test-guest-agent)
fi
mkdir -p "$outdir"
if [ -f "$outdir/$name.qcow2" ]; then
	echo "$outdir/$name.qcow2"
	exit 0
fi
# The partitions: diskimage-builder's way, or the stand-ins where the
# kernel has no device-mapper (dmsetup cannot reach it).
kpartx=kpartx
dm=yes
if ! dmsetup version >/dev/null 2>&1; then
	dm=
	kpartx=$here/no-device-mapper/kpartx
	for tool in unshare partx; do
		command -v "$tool" >/dev/null || die "$tool is missing (util-linux)"
	done
fi
work=$(mktemp -d "$cache/dib.XXXXXX")
# Whatever a failed or killed build left: mounts under the work folder
# (without device-mapper they went with the build's namespace), then the
# loop devices on its files. The folder goes only once nothing is
# mounted in it (its chroot binds the host's /dev).
cleanup() {
	local target loop file
	while read -r target; do
		umount -l "$target" || true
	done < <(findmnt -rn -o TARGET | grep -F "$work/" | sort -r)
	while read -r loop file; do
		[[ $file == "$work"/* ]] || continue
		"$kpartx" -d "$loop" || true
		losetup -d "$loop" || true
	done < <(losetup -l -n -O NAME,BACK-FILE)
	if findmnt -rn -o TARGET | grep -qF "$work/"; then
		echo "dib.sh: $work still has mounts; left in place" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
start=$(date +%s)

# Octavia's diskimage-create.sh with its defaults for a Debian amphora,
# Debian bookworm, nftables and SSH, minus the elements the package stands
# in for: amphora-agent (and octavia-lib, its Python library), certs-ramfs
# (the package's tmpfs), sos and pip-cache (the Python agent's).
export ELEMENTS_PATH=$elements:$here/elements
export DIB_AMPHORA_AGENT_DEB=$deb DIB_RELEASE=bookworm DIB_DISTRIBUTION_MIRROR=$mirror
# diskimage-builder 3.13 names the security suite the pre-bullseye way
# (bookworm/updates) for every release but bullseye: bookworm-security.
export DIB_DEBIAN_SECURITY_MIRROR=$mirror-security DIB_DEBIAN_SECURITY_SUBPATH=-security
export DIB_CLOUD_INIT_DATASOURCES=ConfigDrive CLOUD_INIT_DATASOURCES=ConfigDrive DIB_GRUB_TIMEOUT=0
export DIB_OCTAVIA_AMP_USE_NFTABLES=True DIB_OCTAVIA_AMP_USE_SSH=True
# Its build folder on disk, not in a tmpfs of RAM.
export DIB_NO_TMPFS=1 TMPDIR=$work
dib=(disk-image-create -a amd64 -t qcow2 --image-size 2 -o "$work/$name"
	debian-minimal vm haproxy-octavia rebind-sshd no-resolvconf amphora-agent-deb
	cloud-init-datasources remove-default-ints keepalived-octavia ipvsadmin "${extra[@]}")
if [ -z "$dm" ]; then
	# diskimage-builder runs them through sudo, whose secure_path ignores
	# PATH: bound over the files sudo would run, in a mount namespace
	# private to the build, they are all it sees, and the host's kpartx
	# and dmsetup stay as they are. Its mounts go with the namespace and
	# its processes with the PID namespace, however the build ends; /proc
	# is the PID namespace's, as its ps (for processes left in the
	# chroot) needs.
	real_kpartx=$(realpath -e "$(sudo sh -c 'command -v kpartx')")
	real_dmsetup=$(realpath -e "$(sudo sh -c 'command -v dmsetup')")
	echo "dib.sh: no device-mapper here: partitions through loop partitions (no-device-mapper/kpartx)" >&2
	dib=(unshare --mount --propagation private --pid --fork --kill-child --mount-proc -- sh -euc '
		mount --bind "$1" "$2"; mount --bind "$3" "$4"; shift 4; exec "$@"' sh
		"$kpartx" "$real_kpartx" "$here/no-device-mapper/dmsetup" "$real_dmsetup" "${dib[@]}")
fi
timeout --kill-after=1m "${AMPHORA_DIB_TIMEOUT:-60m}" "${dib[@]}" >"$work/dib.log" 2>&1 ||
	{
		cp "$work/dib.log" "$cache/dib-failed.log"
		tail -40 "$work/dib.log" >&2
		die "disk-image-create failed (whole log: $cache/dib-failed.log)"
	}
# Earlier builds of the same kind go (each is hundreds of MB).
for old in "$outdir"/amphora-x64-haproxy-dib-debian-bookworm-agent-*"${AMPHORA_DIB_TEST:+-test}".qcow2; do
	[ -e "$old" ] || continue
	case $old in *-test.qcow2) [ -n "${AMPHORA_DIB_TEST:-}" ] || continue ;; esac
	rm -f "$old"
done
mv "$work/$name.qcow2" "$outdir/$name.qcow2"
cp "$work/dib.log" "$cache/dib.log"
echo "dib.sh: $(du -h "$outdir/$name.qcow2" | cut -f1) $outdir/$name.qcow2, built in $(($(date +%s) - start))s" >&2
echo "$outdir/$name.qcow2"
