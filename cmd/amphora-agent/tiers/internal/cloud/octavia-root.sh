#!/usr/bin/env bash
# Builds a Debian root file system holding another release's Octavia
# control plane (API, worker, health manager, housekeeping and
# octavia-db-manage), which the cloud tier runs in place of the host's:
# the host stays bookworm (Octavia 11) and trixie's Octavia 16 runs from
# this root (bwrap binds the test's folder and the project's drivers into
# it; MariaDB and RabbitMQ stay the host's).
#
# Usage: octavia-root.sh SUITE [cache-dir]   (default /var/tmp/amphora-agent-image)
# Prints the root's folder, named after the suite and a hash of this
# script and the preseed: same inputs, no build.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
suite=${1:?usage: octavia-root.sh SUITE [cache-dir]}
cache=${2:-${AMPHORA_IMAGE_CACHE:-/var/tmp/amphora-agent-image}}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
case "$suite" in
trixie) ;;
*) echo "octavia-root.sh: no control plane root for $suite (the host's Octavia serves bookworm)" >&2; exit 1 ;;
esac
packages=octavia-api,octavia-worker,octavia-health-manager,octavia-housekeeping,python3-pymysql
# shellcheck source=../root-cache.sh
. "$here/../root-cache.sh"
root_cache octavia-root "$suite" "$cache" "$0" "$here/debconf-preseed.txt"
start=$(date +%s)
# The packages' configure questions are answered "no" before they are
# unpacked (the essential hook runs before --include's packages).
mmdebstrap --variant=minbase --components=main --include="$packages" \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--essential-hook="chroot \"\$1\" debconf-set-selections <\"$here/debconf-preseed.txt\"" \
	"$suite" "$work/root" "deb $mirror $suite main" "deb $mirror-security $suite-security main" \
	>"$work/mmdebstrap.log" 2>&1 || { tail -30 "$work/mmdebstrap.log" >&2; exit 1; }
chroot "$work/root" dpkg-query -W -f='${Version}\n' python3-octavia >"$work/root/.octavia-version"
echo "octavia-root.sh: Octavia $(cat "$work/root/.octavia-version") on Debian $suite, $(du -sh "$work/root" | cut -f1), built in $(($(date +%s) - start))s" >&2
root_done
