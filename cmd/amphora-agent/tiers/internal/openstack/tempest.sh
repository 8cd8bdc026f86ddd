#!/bin/bash
# Runs octavia-tempest-plugin inside the tier's cloud (cloud.sh exec …):
# writes tempest.conf for this cloud, runs the tests whose ids match
# TEMPEST_REGEX one at a time, and leaves one line per test in
# /var/lib/aa-tempest/results.csv (test,status,start_time,stop_time;
# status success, failure, error, skip or xfail; a class whose set-up
# failed or skipped is one "setUpClass (…)" line).
#
# Environment: TEMPEST_REGEX (required); TEMPEST_TOPOLOGY (SINGLE). The
# member servers boot from boot.sh's member image and flavor; without
# them the tests that boot servers skip.
set -euo pipefail
# Its caller sees only the exit status and standard error.
trap 'echo "tempest.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR
: "${TEMPEST_REGEX:?}"
MEMBER_IMAGE=$(cat /aa/member-image 2>/dev/null || true)
MEMBER_FLAVOR=member
# member-image.sh's login user.
MEMBER_USER=debian
ws=/var/lib/aa-tempest
# A workspace registry of this run's own: tempest init refuses a name
# that an earlier run (another image's) registered.
rm -rf $ws $ws.yaml /etc/aa-tempest
mkdir -p /etc/aa-tempest
export OS_CLOUD=admin
public=$(openstack network show public -f value -c id)
plugin=/usr/lib/python3/dist-packages/octavia_tempest_plugin
validation=false
[ -n "${MEMBER_IMAGE:-}" ] && validation=true

cat >/etc/aa-tempest/tempest.conf <<EOF
[DEFAULT]
debug = true

[auth]
use_dynamic_credentials = true
create_isolated_networks = false
admin_username = admin
admin_password = aa-secret
admin_project_name = admin
admin_domain_name = Default

[identity]
uri_v3 = http://127.0.0.1:5000/v3
region = RegionOne
v3_endpoint_type = public

[service_available]
load_balancer = true
nova = true
neutron = true
glance = true
barbican = true
cinder = false
swift = false
horizon = false
heat = false

[compute]
image_ref = ${MEMBER_IMAGE:-}
flavor_ref = ${MEMBER_FLAVOR:-}

[network]
# The plugin makes its own project networks (VLANs here), routes them to
# this one and reaches servers and VIPs through floating IPs on it.
public_network_id = $public
floating_network_name = public
project_networks_reachable = false

[network-feature-enabled]
port_security = true

[validation]
run_validation = $validation
connect_method = floating
image_ssh_user = ${MEMBER_USER:-}
# Nova makes RSA keypairs; tempest's default ecdsa would misread them.
ssh_key_type = rsa
auth_method = keypair
ip_version_for_ssh = 4

[load_balancer]
provider = amphora
RBAC_test_type = none
admin_role = admin
member_role = member
observer_role = reader
global_observer_role = reader
test_with_noop = false
test_with_ipv6 = true
# The firewall driver enforces security groups: the plugin opens its
# members' ports with groups of its own.
enable_security_groups = true
test_server_path = $plugin/contrib/test_server/test_server.bin
loadbalancer_topology = ${TEMPEST_TOPOLOGY:-SINGLE}
lb_build_timeout = 1200
lb_build_interval = 10
build_timeout = 900
build_interval = 5
check_timeout = 300
check_interval = 5
scp_connection_timeout = 10
scp_connection_attempts = 30
log_user_roles = false
# Inside the documentation ranges, away from the management network
# (198.51.100.0/26) and the public one (203.0.113.0/25), and apart from
# each other (one router joins them). The plugin picks VIP addresses at
# offsets 10 to 100 of its subnet: a /25 at least.
vip_subnet_cidr = 198.51.100.128/25
member_1_ipv4_subnet_cidr = 203.0.113.128/26
member_2_ipv4_subnet_cidr = 203.0.113.192/26
# IPv6 VIP subnets come from boot.sh's default pool, plugged into its
# router1 (routed from the namespace); the members' subnets are only the
# amphora's to reach.
default_ipv6_subnetpool = shared-default-subnetpool-v6
default_router = router1
vip_ipv6_subnet_cidr = 2001:db8:8000:ffff::/64
member_1_ipv6_subnet_cidr = 2001:db8:1::/64
member_2_ipv6_subnet_cidr = 2001:db8:2::/64

[loadbalancer-feature-enabled]
not_implemented_is_error = true
# The plugin stores its certificates in boot.sh's Barbican.
terminated_tls_enabled = true
log_offload_enabled = false
prometheus_listener_enabled = true
spare_pool_enabled = false
EOF

tempest init --workspace-path $ws.yaml --config-dir /etc/aa-tempest $ws >/tmp/aa-tempest-init.log 2>&1 ||
	{ cat /tmp/aa-tempest-init.log >&2; exit 1; }
cd $ws
# Nova removes a guest's console log with the guest, and the plugin
# deletes its servers when a class ends, pass or fail: keep copies for
# the run's logs (a member server that never answered SSH is only
# explained there).
mkdir -p /var/log/aa/consoles
while sleep 5; do
	for f in /var/lib/nova/instances/*/console.log; do
		[ -e "$f" ] && cp "$f" "/var/log/aa/consoles/$(basename "$(dirname "$f")").log"
	done
done </dev/null >/dev/null 2>&1 &
keeper=$!
# The plugin deletes its load balancers too: their amphorae's own view
# (amphora-logs.sh), refreshed every minute, outlives them. Neither loop
# may hold this script's output open: its caller waits for that to close,
# and a sleep left over after the kill below would hold it a minute.
while sleep 60; do bash /aa/amphora-logs.sh || true; done </dev/null >/dev/null 2>&1 &
amphorae=$!
rc=0
tempest run --config-file etc/tempest.conf --concurrency 1 --regex "$TEMPEST_REGEX" >$ws/run.log 2>&1 || rc=$?
stestr last --subunit >$ws/results.subunit 2>/dev/null || true
# subunit2csv exits 1, silently, whenever a test failed: an outcome its
# caller reads from results.csv, not a failure of this script.
subunit2csv <$ws/results.subunit >$ws/results.csv || true
kill $keeper $amphorae 2>/dev/null || true
echo "tempest run: exit $rc" >>$ws/run.log
# With the services' logs, which a failed run keeps.
stamp=$(date +%H%M%S)
cp $ws/run.log /var/log/aa/tempest-$stamp-run.log
cp $ws/results.csv /var/log/aa/tempest-$stamp-results.csv
exit 0
