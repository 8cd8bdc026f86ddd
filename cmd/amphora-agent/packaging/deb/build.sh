#!/usr/bin/env bash
# Builds the amphora-agent Debian package (bookworm, amd64) with plain
# dpkg-deb: the package is one static binary and its symlinks, two shell
# scripts, three units, rsyslog's socket, a manual page and a few
# documents, which needs no packaging framework.
#
#   build.sh BINARY VERSION OUTDIR
#
# BINARY is `make build`'s static binary; VERSION is what the Makefile
# passes to -X .../cli.Version (`git describe --tags --always --dirty`), turned
# into a Debian version by debversion below. Prints the package's path,
# OUTDIR/amphora-agent_<debian version>_amd64.deb.
set -euo pipefail

die() {
	echo "deb/build.sh: $*" >&2
	exit 1
}

[ $# -eq 3 ] || die "usage: build.sh BINARY VERSION OUTDIR"
bin=$1 raw=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
packaging=$(dirname "$here")
unit=$packaging/systemd/amphora-agent.service

# debversion turns git describe output into a Debian version that sorts
# like the history (HEAD's commit date, UTC, orders untagged builds):
#   v1.2.3             -> 1.2.3
#   v1.2.3-rc1         -> 1.2.3~rc1      (a pre-release sorts before 1.2.3)
#   v1.2.3-4-gabc1234  -> 1.2.3+git20250102.4.abc1234
#   abc1234 (no tag)   -> 0.0~git20250102.abc1234
# and a modified tree ("-dirty") adds "+dirty".
debversion() {
	local v=$1 dirty= date
	case $v in *-dirty)
		dirty=+dirty
		v=${v%-dirty}
		;;
	esac
	date=$(TZ=UTC0 git -C "$here" log -1 --format=%cd --date=format-local:%Y%m%d 2>/dev/null) || date=
	if [[ $v =~ ^[0-9a-f]{7,40}$ ]]; then
		[ -n "$date" ] || die "no git history to date version $1"
		v=0.0~git$date.$v
	elif [[ $v =~ ^v?([0-9][0-9A-Za-z.~+-]*)-([0-9]+)-g([0-9a-f]+)$ ]]; then
		[ -n "$date" ] || die "no git history to date version $1"
		v=${BASH_REMATCH[1]//-/\~}+git$date.${BASH_REMATCH[2]}.${BASH_REMATCH[3]}
	elif [[ $v =~ ^v?([0-9][0-9A-Za-z.~+-]*)$ ]]; then
		v=${BASH_REMATCH[1]//-/\~}
	else
		die "cannot make a Debian version of \"$1\" (set VERSION=<tag or git describe output>)"
	fi
	echo "$v$dirty"
}

[ -f "$unit" ] || die "missing systemd unit $unit (the package installs it as /lib/systemd/system/amphora-agent.service)"
[ -f "$bin" ] || die "missing binary $bin (run make build)"
# The package says amd64: an ELF file whose e_machine is 0x3e (x86-64).
[ "$(od -An -tx1 -N4 "$bin" | tr -d ' \n')$(od -An -tx1 -j18 -N2 "$bin" | tr -d ' \n')" = 7f454c463e00 ] ||
	die "$bin is not an x86-64 ELF executable"
for tool in dpkg-deb dpkg-parsechangelog gzip; do
	command -v "$tool" >/dev/null || die "$tool not found"
done

version=$(debversion "$raw")
dpkg --validate-version "$version" || die "invalid Debian version $version"

# dpkg-deb takes mtimes from the tree; HEAD's date makes rebuilds identical.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || date +%s)}
umask 022
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"

install -D -m 0755 "$bin" "$stage/usr/local/bin/amphora-agent"
# The binary runs a tool when called by one of these names (package cli's aliases).
for name in amphora-interface haproxy-vrrp-check amphora-health-checker; do
	ln -s amphora-agent "$stage/usr/local/bin/$name"
done
# The LVS masquerade script, under the name upstream's image and the
# agent's lvs_masquerade_script default use, and the one Debian's
# octavia-agent installs (and its interface files name, found on PATH).
install -m 0755 "$packaging/lvs-masquerade.sh" "$stage/usr/local/bin/lvs-masquerade.sh"
install -d -m 0755 "$stage/usr/bin"
ln -s ../local/bin/lvs-masquerade.sh "$stage/usr/bin/octavia-agent-lvs-masquerade"
# Its name before UDP listeners became LVS listeners, which interface files
# written by older agents still call (upstream's image links it too).
ln -s lvs-masquerade.sh "$stage/usr/local/bin/udp-masquerade.sh"
# The external check of PING health monitors, where Octavia's HAProxy
# template names it.
install -D -m 0755 "$packaging/ping-wrapper.sh" "$stage/var/lib/octavia/ping-wrapper.sh"
install -D -m 0644 "$unit" "$stage/lib/systemd/system/amphora-agent.service"
install -D -m 0644 "$(dirname "$unit")/amphora-config-drive.service" "$stage/lib/systemd/system/amphora-config-drive.service"
# Not enabled: the agent's unit pulls it in (RequiresMountsFor=).
install -D -m 0644 "$(dirname "$unit")/var-lib-octavia-certs.mount" "$stage/lib/systemd/system/var-lib-octavia-certs.mount"
doc=$stage/usr/share/doc/amphora-agent
install -D -m 0644 "$here/copyright" "$doc/copyright"
install -D -m 0644 "$here/amphora-agent.conf" "$doc/examples/amphora-agent.conf"
install -D -m 0644 "$here/lintian-overrides" "$stage/usr/share/lintian/overrides/amphora-agent"
# The socket Octavia's HAProxy configs log to (upstream's amphora-agent
# image element ships the same): a conffile, kept on remove as Debian
# policy has it.
install -D -m 0644 "$here/55-octavia-socket.conf" "$stage/etc/rsyslog.d/55-octavia-socket.conf"
# What upstream's element tells NetworkManager, for images that run it.
install -D -m 0644 "$here/NetworkManager/amphora-agent.conf" "$stage/etc/NetworkManager/conf.d/amphora-agent.conf"

maintainer="amphora-agent maintainers <maintainers@users.noreply.a-seed-26ea428e.example>"
# The changelog's newest entry must be this build's version: a build that
# is not a release listed in deb/changelog gets a snapshot entry on top.
# A native package (no Debian revision) ships it as changelog.gz.
top=$(dpkg-parsechangelog -l "$here/changelog" -S Version)
{
	if [ "$top" != "$version" ]; then
		dpkg --compare-versions "$version" gt "$top" ||
			die "version $version is older than deb/changelog's newest entry $top"
		printf 'amphora-agent (%s) UNRELEASED; urgency=medium\n\n  * Snapshot of git %s.\n\n -- %s  %s\n\n' \
			"$version" "$raw" "$maintainer" "$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
	fi
	cat "$here/changelog"
} | gzip -9n >"$doc/changelog.gz"

# amphora-agent(8): the page's text with the usage the binary prints, so
# the page lists what this build accepts. Each usage line is roff-quoted
# (\& keeps a leading dot or quote literal, \e is a backslash).
usage=$("$bin" --help 2>&1 || true)
[ -n "$usage" ] || die "$bin --help printed nothing"
man=$stage/usr/share/man/man8
install -d -m 0755 "$man"
USAGE=$(printf '%s\n' "$usage" | sed -e 's/\\/\\e/g' -e 's/^/\\\&/') \
	VERSION=$version DATE=$(LC_ALL=C date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d) \
	awk '{
		if ($0 == "@USAGE@") { print ENVIRON["USAGE"]; next }
		gsub(/@VERSION@/, ENVIRON["VERSION"]); gsub(/@DATE@/, ENVIRON["DATE"]); print
	}' "$here/amphora-agent.8.in" | gzip -9n >"$man/amphora-agent.8.gz"
for name in amphora-interface haproxy-vrrp-check amphora-health-checker octavia-agent-lvs-masquerade; do
	ln -s amphora-agent.8.gz "$man/$name.8.gz"
done

install -d -m 0755 "$stage/DEBIAN"
install -m 0755 "$here/postinst" "$here/prerm" "$here/postrm" "$stage/DEBIAN/"
(cd "$stage" && find etc -type f | sed 's|^|/|' | sort) >"$stage/DEBIAN/conffiles"
# md5sums lets `dpkg --verify` check the installed files (conffiles have
# their sums in dpkg's database, as dh_md5sums leaves them out).
(cd "$stage" && find usr lib var -type f -exec md5sum {} + | sort -k2) >"$stage/DEBIAN/md5sums"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<CONTROL
Package: amphora-agent
Version: $version
Architecture: amd64
Maintainer: $maintainer
Installed-Size: $size
Depends: haproxy, keepalived, ipvsadm, iproute2, nftables, netcat-openbsd, kmod, udev, iputils-ping, procps
Recommends: rsyslog
Conflicts: octavia-agent
Section: net
Priority: optional
Description: OpenStack Octavia amphora agent (Go)
 The agent that runs inside an Octavia load-balancer VM (amphora). The
 Octavia controller drives it over a mutual-TLS REST API on port 9443; it
 runs HAProxy and keepalived in the amphora-haproxy network namespace and
 sends signed health heartbeats to the health managers. It replaces the
 Python agent that ships with Octavia (octavia-agent), with the same API,
 heartbeats and configuration file.
 .
 The service reads /etc/octavia/amphora-agent.conf, which the controller
 renders; an annotated example is in /usr/share/doc/amphora-agent/examples.
CONTROL

mkdir -p "$out"
deb=$out/amphora-agent_${version}_amd64.deb
dpkg-deb --build --root-owner-group "$stage" "$deb" >/dev/null
echo "$deb"
