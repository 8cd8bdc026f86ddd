#!/usr/bin/env bash
# Makes the amphora image an operator uploads to Glance: the base image
# (build.sh) with the agent's package installed, ready for
#
#   openstack image create --disk-format qcow2 --container-format bare \
#       --tag amphora --file <image> amphora-x64-haproxy
#
# Usage: bake.sh DEB OUTDIR
# Prints OUTDIR/amphora-x64-haproxy-debian-<suite>-<base key>-agent-<version>.qcow2:
# the Debian suite and base image key (build.sh's inputs) and the package's
# version name what went in. An image of that name already in OUTDIR is
# kept as it is; earlier ones of the same suite are removed (each is
# hundreds of MB). The base is built first if it is not cached. The qcow2
# is compressed, as diskimage-builder's are.
set -euo pipefail

die() {
	echo "bake.sh: $*" >&2
	exit 1
}
[ $# -eq 2 ] || die "usage: bake.sh DEB OUTDIR"
deb=$(realpath "$1") outdir=$2
[ -f "$deb" ] || die "no package $deb (make deb builds it)"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=disk.sh
. "$here/disk.sh"

[ -z "${AMPHORA_IMAGE_VARIANT:-}" ] || die "a variant carries its own agent: nothing to bake"
base=$("$here/build.sh")
suite=$(cat "$base/suite")
version=$(dpkg-deb -f "$deb" Version)
[[ $version =~ ^[0-9A-Za-z.~+:-]+$ ]] || die "unexpected package version $version"
# The base's folder is named <suite>-<key>.
prefix=amphora-x64-haproxy-debian-$(basename "$base")-agent-
image=$outdir/$prefix$version.qcow2
mkdir -p "$outdir"
exec 9>"$outdir/.bake.lock"
flock 9
if [ -f "$image" ]; then
	echo "$image"
	exit 0
fi

work=$(mktemp -d "$(dirname "$base")/bake.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
root=$work/root
mkdir "$root"
zstd -q -d -c "$base/root.tar.zst" | tar --numeric-owner --xattrs --xattrs-include='*' -C "$root" -xpf -
cp "$deb" "$root/tmp/amphora-agent.deb"
# Nothing starts in a chroot (the postinst only enables the units there;
# this keeps it so should the build host run systemd).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
chroot "$root" env DEBIAN_FRONTEND=noninteractive dpkg -i /tmp/amphora-agent.deb >"$work/dpkg.log" 2>&1 ||
	{ cat "$work/dpkg.log" >&2; die "dpkg -i failed"; }
rm -f "$root/usr/sbin/policy-rc.d" "$root/tmp/amphora-agent.deb"
[ "$(chroot "$root" dpkg-query -W -f='${Version}' amphora-agent)" = "$version" ] || die "the package is not installed"
DISK_COMPRESS=1 make_disk "$root" "$work" "$work/image.qcow2"

for old in "$outdir/amphora-x64-haproxy-debian-$suite-"*-agent-*.qcow2; do
	[ -e "$old" ] && rm -f "$old"
done
mv "$work/image.qcow2" "$image"
echo "bake.sh: $(du -h "$image" | cut -f1) $image, baked in $(($(date +%s) - start))s" >&2
echo "$image"
