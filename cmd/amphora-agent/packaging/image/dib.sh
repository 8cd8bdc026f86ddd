#!/usr/bin/env bash
# Builds an amphora image as upstream does, with diskimage-builder and
# Octavia's own elements, the package in place of upstream's amphora-agent
# element (elements/amphora-agent-deb): the path an operator with an image
# pipeline of their own takes. Octavia's elements come from Debian's
# source of octavia 11.0.0 (the controller the tiers run), fetched from
# the Debian mirror once, checked against its SHA-256 and cached.
#
# Usage: dib.sh DEB OUTDIR   (root: debootstrap, loop devices, chroot)
# Prints OUTDIR/amphora-x64-haproxy-dib-debian-bookworm-agent-<version>.qcow2
# (an image of that name is kept; earlier ones are replaced).
# DEBIAN_MIRROR overrides the mirror; AMPHORA_IMAGE_CACHE the cache;
# AMPHORA_DIB_TEST=1 adds the test-only element amphora-test-guest-agent
# (the VM tier's way in) and "-test" to the name.
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
for tool in disk-image-create debootstrap qemu-img curl sudo; do
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
work=$(mktemp -d "$cache/dib.XXXXXX")
trap 'rm -rf "$work"' EXIT
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
disk-image-create -a amd64 -t qcow2 --image-size 2 -o "$work/$name" \
	debian-minimal vm haproxy-octavia rebind-sshd no-resolvconf amphora-agent-deb \
	cloud-init-datasources remove-default-ints keepalived-octavia ipvsadmin "${extra[@]}" >"$work/dib.log" 2>&1 ||
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
echo "dib.sh: $(du -h "$outdir/$name.qcow2" | cut -f1) $outdir/$name.qcow2, built in $(($(date +%s) - start))s" >&2
echo "$outdir/$name.qcow2"
