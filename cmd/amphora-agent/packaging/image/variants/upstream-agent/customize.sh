#!/bin/sh
# The upstream-agent variant (tests only): Debian's octavia-agent, the
# Python amphora agent (Octavia 11 in bookworm, 16 in trixie), instead of
# this project's package, set up as upstream's amphora-agent and
# certs-ramfs image elements do with a distribution package. Run by mmdebstrap as a customize hook with
# the image's root folder as $1 (its /proc, /dev and apt sources are in
# place then).
set -eu
root=$1
here=$(cd "$(dirname "$0")" && pwd)

# octavia-common asks about a database, RabbitMQ and Keystone at install
# time; an amphora has none of them.
cp "$here/debconf-preseed.txt" "$root/tmp/upstream-agent-preseed.txt"
chroot "$root" debconf-set-selections /tmp/upstream-agent-preseed.txt
rm -f "$root/tmp/upstream-agent-preseed.txt"
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	-o Dpkg::Options::=--path-exclude=/usr/share/man/* -o Dpkg::Options::=--path-exclude=/usr/share/doc/* \
	-o Dpkg::Options::=--path-exclude=/usr/share/locale/* octavia-agent
chroot "$root" apt-get clean

# The agent starts at boot once certs-ramfs has mounted its certificate
# folder, which waits for cloud-init to write amphora-agent.conf from the
# config drive (upstream's 11-enable-amphora-agent-systemd and
# 30-enable-certs-ramfs-service).
chroot "$root" systemctl enable octavia-agent.service octavia-agent-certs-ramfs.service >/dev/null 2>&1

# Debian's octavia-agent does not make the socket Octavia's HAProxy configs
# log to; upstream's amphora-agent element does, as this project's package.
cp "$here/../../../deb/55-octavia-socket.conf" "$root/etc/rsyslog.d/"

# Debian's rsyslog profile is enforced once AppArmor is installed (the
# package depends on it): let rsyslogd make the socket Octavia's HAProxy
# configs log to, as upstream's amphora-apparmor element does.
if [ -d "$root/etc/apparmor.d/rsyslog.d" ]; then
	cp "$here/apparmor-rsyslog-octavia" "$root/etc/apparmor.d/rsyslog.d/octavia"
fi

# Debian's octavia-agent ships sysctl settings (octavia-agent-sysctl.conf)
# with fs.nr_open = 2097152, read after the image's 60-amphora.conf, below
# the LimitNOFILE = 2600000 of the HAProxy unit its own agent writes:
# trixie's systemd then refuses to start HAProxy (205/LIMITS), which
# bookworm's did not. Upstream's image has no such file and sets 2600000
# (haproxy-octavia element); so does this one, in a file whose name sorts
# after Debian's (systemd-sysctl reads them in that order, the last wins).
printf 'fs.nr_open = 2600000\n' >"$root/etc/sysctl.d/zz-amphora-nr-open.conf"
