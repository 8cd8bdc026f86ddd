#!/usr/bin/env bash
# Builds a Debian root file system holding a whole OpenStack (Keystone,
# Glance, Placement, Nova with libvirt and QEMU, Neutron with Open
# vSwitch, Octavia, Barbican, tempest with the Octavia and Barbican
# plugins, MariaDB and RabbitMQ) and a Kubernetes control plane's
# Debian parts (etcd, kubectl) for the real-OpenStack tier (make
# test-openstack) and the Kubernetes tier (make test-kubernetes),
# which runs it chrooted in a network namespace of its own. Nothing is
# configured or started here: the packages' debconf questions are all
# answered "no" (debconf-preseed.txt) and a policy-rc.d that exits 101 is
# left in the root, so no package starts a service, now or when the tier
# installs more in it.
#
# Usage: openstack-root.sh SUITE [cache-dir]   (default /var/tmp/amphora-agent-image)
# Prints the root's folder, named after the suite and a hash of this
# script and the preseed: same inputs, no build. The versions installed
# are in the root's .versions.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
suite=${1:?usage: openstack-root.sh SUITE [cache-dir]}
cache=${2:-${AMPHORA_IMAGE_CACHE:-/var/tmp/amphora-agent-image}}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
case "$suite" in
trixie) ;;
*) echo "openstack-root.sh: no OpenStack root for $suite (only trixie's 2025.1 is known to work)" >&2; exit 1 ;;
esac
packages=(
	keystone
	glance-api
	placement-api
	nova-api nova-conductor nova-scheduler nova-compute-qemu
	neutron-server neutron-openvswitch-agent neutron-dhcp-agent neutron-l3-agent neutron-metadata-agent
	openvswitch-switch libvirt-daemon-system qemu-system-x86
	octavia-api octavia-worker octavia-health-manager octavia-housekeeping
	barbican-api python3-barbicanclient
	python3-openstackclient python3-octaviaclient tempest octavia-tempest-plugin barbican-tempest-plugin
	etcd-server kubernetes-client
	uwsgi-core uwsgi-plugin-python3 python3-pymysql
	mariadb-server rabbitmq-server
	ethtool iproute2 dnsmasq-base sudo
)
# shellcheck source=../root-cache.sh
. "$here/../root-cache.sh"
root_cache openstack-root "$suite" "$cache" "$0" "$here/debconf-preseed.txt"
start=$(date +%s)
# The configure questions are answered "no" before any package is
# unpacked (the essential hook runs before --include's packages).
include=$(IFS=,; echo "${packages[*]}")
mmdebstrap --variant=apt --components=main --include="$include" \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--essential-hook="chroot \"\$1\" debconf-set-selections <\"$here/debconf-preseed.txt\"" \
	"$suite" "$work/root" "deb $mirror $suite main" "deb $mirror-security $suite-security main" \
	>"$work/mmdebstrap.log" 2>&1 || { tail -30 "$work/mmdebstrap.log" >&2; exit 1; }
# mmdebstrap removes its own policy-rc.d when it is done: this one stays,
# so that nothing the tier installs in the root starts a service either.
printf '#!/bin/sh\n# openstack-root.sh: no service starts at install; the tier starts what it runs.\nexit 101\n' \
	>"$work/root/usr/sbin/policy-rc.d"
chmod 755 "$work/root/usr/sbin/policy-rc.d"
chroot "$work/root" dpkg-query -W -f='${Package} ${Version}\n' keystone python3-glance python3-placement \
	python3-nova python3-neutron python3-octavia python3-barbican tempest octavia-tempest-plugin \
	barbican-tempest-plugin etcd-server kubectl libvirt-daemon \
	openvswitch-switch qemu-system-x86 mariadb-server rabbitmq-server uwsgi-core >"$work/root/.versions"
count=$(chroot "$work/root" dpkg-query -W -f='${db:Status-Abbrev}\n' | grep -c '^ii')
echo "openstack-root.sh: OpenStack on Debian $suite, $count packages, $(du -sh "$work/root" | cut -f1), built in $(($(date +%s) - start))s" >&2
root_done
