#!/bin/bash
# Configures and starts a whole OpenStack 2025.1 inside the tier's
# namespaces, as their first process (inside.sh execs it in the overlay
# root): MariaDB, RabbitMQ, Open vSwitch (userspace datapath), Keystone,
# Glance, Placement, Nova with libvirt and QEMU TCG, Neutron (ML2,
# Open vSwitch agent, DHCP and L3 agents), Barbican, Octavia. Every service is a
# child of this shell, which waits forever once the cloud is ready
# (/aa/ready) and reaps whatever the services orphan. Any failed step
# writes /aa/failed and ends the namespace.
#
# What the run needs is in /aa: amphora.qcow2 (the image Octavia boots).
set -Eeuo pipefail

log=/var/log/aa
mkdir -p /run/lock
mkdir -p $log /run/mysqld /run/openvswitch /run/libvirt /var/lib/nova/instances /var/lib/glance/images \
	/var/lock/nova /var/lock/neutron /var/lock/octavia /etc/octavia/certs /etc/barbican
start=${EPOCHREALTIME/./}
step() { local us=$((${EPOCHREALTIME/./} - start)); printf '%4d.%01ds %s\n' $((us / 1000000)) $((us / 100000 % 10)) "$*"; }
trap 'step "failed at line $LINENO: $BASH_COMMAND"; touch /aa/failed; exit 1' ERR

# Service NAME CMD…: started in the background, its output to
# /var/log/aa/NAME.log, its pid in /aa/pids.
service() {
	local name=$1
	shift
	"$@" >>"$log/$name.log" 2>&1 </dev/null &
	echo "$name $!" >>/aa/pids
}

# until_ok SECONDS WHAT CMD…: waits for CMD to succeed.
until_ok() {
	local limit=$1 what=$2 t0
	shift 2
	t0=$(date +%s)
	until "$@" >/dev/null 2>&1; do
		if [ $(($(date +%s) - t0)) -ge "$limit" ]; then
			step "$what: not within ${limit}s"
			return 1
		fi
		sleep 0.5
	done
	step "$what"
}

# The services' clients and sudo want the host's name to resolve.
cat >/etc/hosts <<EOF
127.0.0.1 localhost
127.0.1.1 $(hostname)
EOF
ip link set lo up
sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1

pw=aa-secret
keystone=http://127.0.0.1:5000
rabbit=rabbit://guest:guest@127.0.0.1:5672/
db() { echo "mysql+pymysql://$1:$pw@127.0.0.1/$1"; }

# --- MariaDB and RabbitMQ -------------------------------------------------
# MariaDB 11.8 turns InnoDB's snapshot isolation on by default: a locking
# read of a row another transaction changed since this one's snapshot
# fails (error 1020) instead of reading the latest version. OpenStack's
# services are written for the classic REPEATABLE READ and do not retry
# that (Nova's bug 2116186; operators' deployments turn it off). The
# likely cause of a health monitor create that Octavia's API once
# answered with its "database error on insert" 400 in this tier.
service mariadb mariadbd --user=root --datadir=/var/lib/mysql --bind-address=127.0.0.1 \
	--socket=/run/mysqld/mysqld.sock --skip-log-bin --innodb-flush-log-at-trx-commit=0 \
	--max-connections=1000 --innodb-snapshot-isolation=OFF
until_ok 60 "mariadb answers" mariadb -e 'SELECT 1'
for name in keystone glance placement nova nova_api nova_cell0 neutron barbican octavia; do
	user=${name%%_*}
	mariadb -e "CREATE DATABASE $name; CREATE USER IF NOT EXISTS '$user'@'127.0.0.1' IDENTIFIED BY '$pw';
		GRANT ALL ON $name.* TO '$user'@'127.0.0.1';"
done

export HOME=/var/lib/rabbitmq RABBITMQ_NODENAME=rabbit@localhost RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
echo 'loopback_users.guest = true' >/etc/rabbitmq/rabbitmq.conf
service epmd epmd -address 127.0.0.1
service rabbitmq /usr/lib/rabbitmq/bin/rabbitmq-server
export HOME=/root

# --- Open vSwitch, userspace datapath (no kernel module on these hosts) ---
ovsdb-tool create /etc/openvswitch/conf.db /usr/share/openvswitch/vswitch.ovsschema
service ovsdb-server ovsdb-server /etc/openvswitch/conf.db --remote=punix:/run/openvswitch/db.sock --remote=ptcp:6640:127.0.0.1 \
	--pidfile=/run/openvswitch/ovsdb-server.pid
until_ok 30 "ovsdb-server answers" ovs-vsctl --no-wait show
ovs-vsctl --no-wait init
ovs-vsctl --no-wait set Open_vSwitch . other_config:userspace-tso-enable=true
service ovs-vswitchd ovs-vswitchd --pidfile=/run/openvswitch/ovs-vswitchd.pid
until_ok 30 "ovs-vswitchd answers" ovs-appctl -t ovs-vswitchd version
# The provider bridges (bridge_mappings below). br-mgmt's own port is the
# controller's address on the amphorae's management network; br-ex's is
# "outside the cloud", the upstream router of the floating IPs.
for br in br-mgmt br-ex br-tenant; do
	ovs-vsctl add-br $br -- set Bridge $br datapath_type=netdev
	ip link set $br up
done
ip address add 198.51.100.1/26 dev br-mgmt
ip address add 203.0.113.1/25 dev br-ex
# Clients outside a cloud send finished checksums. br-ex's own port stands
# for them, and with userspace TSO its tap offers checksum offload: the
# kernel then left IPv6 UDP checksums unfinished, router1 forwarded them
# so, and the firewall's conntrack in br-int (OVS 3.5.0) dropped every
# such datagram as invalid before the amphora (IPv6 UDP load balancers
# never answered, with either agent; TCP and IPv4 were not affected).
ethtool -K br-ex tx off >/dev/null

until_ok 120 "rabbitmq answers" env HOME=/var/lib/rabbitmq /usr/lib/rabbitmq/bin/rabbitmqctl -n rabbit@localhost await_startup

# --- Keystone ---------------------------------------------------------------
cat >/etc/keystone/keystone.conf <<EOF
[database]
connection = $(db keystone)
[token]
provider = fernet
[identity]
# Thousands of users are made by tempest: the default 12 rounds of bcrypt
# would cost minutes of CPU on two cores.
password_hash_rounds = 4
[fernet_tokens]
key_repository = /etc/keystone/fernet-keys
[credential]
key_repository = /etc/keystone/credential-keys
EOF
keystone-manage db_sync
keystone-manage fernet_setup --keystone-user root --keystone-group root
keystone-manage credential_setup --keystone-user root --keystone-group root
keystone-manage bootstrap --bootstrap-password $pw --bootstrap-admin-url $keystone/v3/ \
	--bootstrap-public-url $keystone/v3/ --bootstrap-internal-url $keystone/v3/ --bootstrap-region-id RegionOne
step "keystone database"

# wsgi NAME PORT SCRIPT [PROCESSES THREADS]: an API under uWSGI, by
# default one process of four threads.
wsgi() {
	service "$1" uwsgi --plugin python3 --http11-socket "127.0.0.1:$2" --wsgi-file "$3" --master \
		--processes "${4:-1}" --threads "${5:-4}" --enable-threads --lazy-apps --die-on-term --need-app \
		--buffer-size 65535
}
wsgi keystone 5000 /usr/bin/keystone-wsgi-public
until_ok 60 "keystone answers" curl -sf $keystone/v3

mkdir -p /etc/openstack
cat >/etc/openstack/clouds.yaml <<EOF
clouds:
  admin:
    auth:
      auth_url: $keystone/v3
      username: admin
      password: $pw
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    identity_api_version: 3
  demo:
    auth:
      auth_url: $keystone/v3
      username: demo
      password: $pw
      project_name: demo
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    identity_api_version: 3
EOF

# Services, endpoints and service users in one Python process: the CLI
# pays a second of start-up per call.
python3 - <<EOF
import openstack
c = openstack.connect(cloud="admin")
service_project = c.identity.create_project(name="service", domain_id="default")
admin = c.identity.find_role("admin")
roles = {r: c.identity.find_role(r) or c.identity.create_role(name=r) for r in ("service", "member", "reader", "load-balancer_member", "load-balancer_admin", "load-balancer_observer", "load-balancer_global_observer")}
apis = [("glance", "image", 9292, ""), ("placement", "placement", 8778, ""),
        ("nova", "compute", 8774, "/v2.1"), ("neutron", "network", 9696, ""),
        ("barbican", "key-manager", 9311, ""), ("octavia", "load-balancer", 9876, "")]
for name, kind, port, path in apis:
    user = c.identity.create_user(name=name, password="$pw", domain_id="default", default_project_id=service_project.id)
    # New default policies of Nova and Neutron want the service role on
    # service users (nova-compute clearing a port's device, for instance).
    for role in (admin, roles["service"]):
        c.identity.assign_project_role_to_user(service_project, user, role)
    svc = c.identity.create_service(name=name, type=kind)
    for iface in ("public", "internal", "admin"):
        c.identity.create_endpoint(service_id=svc.id, interface=iface, url="http://127.0.0.1:%d%s" % (port, path), region_id="RegionOne")
# A user of the cloud, with nothing but the member role in a project of
# their own: the tests' "user's door".
demo = c.identity.create_project(name="demo", domain_id="default")
user = c.identity.create_user(name="demo", password="$pw", domain_id="default", default_project_id=demo.id)
c.identity.assign_project_role_to_user(demo, user, roles["member"])
EOF
step "keystone users and endpoints"

# authtoken SECTION USER: keystonemiddleware's and keystoneauth's settings.
auth() {
	cat <<EOF
[$1]
auth_url = $keystone/v3
www_authenticate_uri = $keystone/v3
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = $2
password = $pw
region_name = RegionOne
EOF
}

# --- Glance, Placement --------------------------------------------------------
cat >/etc/glance/glance-api.conf <<EOF
[DEFAULT]
bind_host = 127.0.0.1
bind_port = 9292
workers = 1
enabled_backends = file:file
[database]
connection = $(db glance)
[glance_store]
default_backend = file
[file]
filesystems_store_datadir = /var/lib/glance/images/
[paste_deploy]
flavor = keystone
$(auth keystone_authtoken glance)
EOF
cat >/etc/placement/placement.conf <<EOF
[placement_database]
connection = $(db placement)
[api]
auth_strategy = keystone
$(auth keystone_authtoken placement)
EOF

# --- Nova ---------------------------------------------------------------------
cat >/etc/nova/nova.conf <<EOF
[DEFAULT]
transport_url = $rabbit
# Two cores shared by every service and guest: under a burst of load a
# service's 10 s heartbeat can be minutes late, and the default 60 s
# would take the compute host out of scheduling (see Neutron's below).
service_down_time = 300
state_path = /var/lib/nova
instances_path = /var/lib/nova/instances
my_ip = 127.0.0.1
compute_driver = libvirt.LibvirtDriver
# Octavia hands the amphora its settings on a config drive.
force_config_drive = true
# qcow2 stays qcow2: converting each image to raw costs a minute of TCG host.
force_raw_images = false
osapi_compute_workers = 1
metadata_workers = 1
[api]
auth_strategy = keystone
[api_database]
connection = mysql+pymysql://nova:$pw@127.0.0.1/nova_api
[database]
connection = $(db nova)
[conductor]
workers = 1
[scheduler]
workers = 1
discover_hosts_in_cells_interval = 10
[filter_scheduler]
# One compute host: place everything on it, whatever the overcommit.
enabled_filters = ComputeFilter,ImagePropertiesFilter
[libvirt]
virt_type = qemu
cpu_mode = none
[vnc]
enabled = false
[spice]
enabled = false
[serial_console]
enabled = false
[oslo_concurrency]
lock_path = /var/lock/nova
[glance]
region_name = RegionOne
$(auth keystone_authtoken nova)
$(auth placement placement)
$(auth neutron neutron)
$(auth service_user nova)
send_service_user_token = true
EOF

# --- Neutron -------------------------------------------------------------------
cat >/etc/neutron/neutron.conf <<EOF
[DEFAULT]
# An agent whose 30 s report is late by the default 75 s is "dead", and
# ports cannot bind to its host: at load 36 on these two cores the Open
# vSwitch and DHCP agents' reports came 2 minutes late, and an amphora's
# boot failed with PortBindingFailed. Late is not dead on this host.
agent_down_time = 300
core_plugin = ml2
service_plugins = router
transport_url = $rabbit
auth_strategy = keystone
notify_nova_on_port_status_changes = true
notify_nova_on_port_data_changes = true
bind_host = 127.0.0.1
api_workers = 1
rpc_workers = 1
rpc_state_report_workers = 0
[database]
connection = $(db neutron)
[agent]
root_helper = sudo neutron-rootwrap /etc/neutron/rootwrap.conf
[oslo_concurrency]
lock_path = /var/lock/neutron
$(auth keystone_authtoken neutron)
$(auth nova nova)
$(auth placement placement)
EOF
cat >/etc/neutron/plugins/ml2/ml2_conf.ini <<EOF
[ml2]
type_drivers = flat,vlan
# Projects' own networks are VLANs on br-tenant: one host, no tunnels.
tenant_network_types = vlan
mechanism_drivers = openvswitch
extension_drivers = port_security
[ml2_type_flat]
flat_networks = mgmt,public
[ml2_type_vlan]
network_vlan_ranges = tenant:100:199
EOF
# openvswitch: conntrack flows in br-int, the guests' taps on br-int
# itself. iptables_hybrid: each tap on a Linux bridge of its own, joined
# to br-int by a veth pair that is up before Open vSwitch opens it, so the
# userspace datapath never races libvirt over a tap's flags (README).
firewall=${OPENSTACK_FIREWALL:-openvswitch}
case $firewall in
openvswitch | iptables_hybrid) ;;
*) step "OPENSTACK_FIREWALL=$firewall: openvswitch or iptables_hybrid"; false ;;
esac
cat >/etc/neutron/plugins/ml2/openvswitch_agent.ini <<EOF
[ovs]
bridge_mappings = mgmt:br-mgmt,public:br-ex,tenant:br-tenant
# The userspace datapath: these hosts load no kernel modules.
datapath_type = netdev
[agent]
tunnel_types =
[securitygroup]
enable_security_group = true
firewall_driver = $firewall
EOF
cat >/etc/neutron/dhcp_agent.ini <<EOF
[DEFAULT]
interface_driver = openvswitch
# A netdev bridge's internal port is a tap owned by ovs-vswitchd; one moved
# into a qdhcp namespace stops passing traffic, a veth pair does not.
ovs_use_veth = true
enable_isolated_metadata = false
[ovs]
datapath_type = netdev
EOF
cat >/etc/neutron/l3_agent.ini <<EOF
[DEFAULT]
interface_driver = openvswitch
ovs_use_veth = true
[ovs]
datapath_type = netdev
EOF

# --- Barbican -----------------------------------------------------------------
# Where TERMINATED_HTTPS listeners' certificates live: users store them,
# Octavia's API grants its service user read access (an ACL) and the
# worker fetches them for the amphora. Secrets are encrypted with a key
# of this run's (simple_crypto), there being no HSM or Vault here.
cat >/etc/barbican/barbican.conf <<EOF
[DEFAULT]
host_href = http://127.0.0.1:9311
[database]
connection = $(db barbican)
[secretstore]
enabled_secretstore_plugins = store_crypto
[crypto]
enabled_crypto_plugins = simple_crypto
[simple_crypto_plugin]
kek = $(head -c 32 /dev/urandom | base64)
# Barbican 20 still defaults to its legacy policies, where only a
# "creator" may store a secret; the new defaults (a project's members
# store, its readers read) are what the other services here enforce.
[oslo_policy]
enforce_new_defaults = true
enforce_scope = true
$(auth keystone_authtoken barbican)
EOF
chmod 600 /etc/barbican/barbican.conf

# --- Databases, two at a time (they are CPU bound) --------------------------
dbsync() {
	local name=$1
	shift
	"$@" >>"$log/sync-$name.log" 2>&1 || { step "$name: database sync failed"; tail -20 "$log/sync-$name.log"; return 1; }
}
dbsync glance glance-manage db_sync &
g=$!
dbsync placement placement-manage db sync
wait $g
dbsync neutron neutron-db-manage --config-file /etc/neutron/neutron.conf \
	--config-file /etc/neutron/plugins/ml2/ml2_conf.ini upgrade head &
n=$!
dbsync nova-api nova-manage api_db sync
dbsync nova-cell0 nova-manage cell_v2 map_cell0
dbsync nova-cell1 nova-manage cell_v2 create_cell --name cell1
dbsync nova nova-manage db sync
wait $n
dbsync barbican barbican-manage db upgrade
step "databases"

# --- libvirt ---------------------------------------------------------------
cat >/etc/libvirt/qemu.conf <<EOF
user = "root"
group = "root"
dynamic_ownership = 0
# No AppArmor, cgroups or per-guest mount namespaces in this sandbox.
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
stdio_handler = "file"
EOF
cat >/etc/libvirt/libvirtd.conf <<EOF
unix_sock_group = "root"
unix_sock_rw_perms = "0770"
auth_unix_ro = "none"
auth_unix_rw = "none"
EOF
service libvirtd libvirtd

# --- The services -----------------------------------------------------------
service glance-api glance-api --config-file /etc/glance/glance-api.conf
wsgi placement 8778 /usr/bin/placement-api
wsgi barbican-api 9311 /usr/bin/barbican-wsgi-api
# One thread per process, as Debian's own nova-api-uwsgi.ini has it. nova-api
# runs on eventlet, whose hub is per thread: the RPC reply poller lives in
# the thread that made the process's first call, and a call waiting in
# another thread never sees its reply (interface attach, Octavia's VIP
# plug, ended in MessagingTimeout whenever uWSGI picked another thread,
# though nova-compute had answered within seconds).
wsgi nova-api 8774 /usr/bin/nova-api-wsgi 2 1
service neutron-server neutron-server --config-file /etc/neutron/neutron.conf \
	--config-file /etc/neutron/plugins/ml2/ml2_conf.ini
service nova-conductor nova-conductor --config-file /etc/nova/nova.conf
service nova-scheduler nova-scheduler --config-file /etc/nova/nova.conf
until_ok 60 "libvirtd answers" virsh -c qemu:///system version
service nova-compute nova-compute --config-file /etc/nova/nova.conf
# A guest's tap is brought up by libvirt and made promiscuous by Open
# vSwitch's userspace datapath the moment it appears; both read the
# device's flags, change one and write them all back, and OVS reads from
# a cache of its own. When libvirt's "up" lands between OVS's read and its
# write, OVS writes the tap down again and the guest is cut off for good
# (seen: an amphora that never got its management address, a failover
# that never finished). The kernel datapath of a production cloud sets
# promiscuity inside the kernel, without that race. The guard restores
# what libvirt asked for: a tap of a running guest found down at two
# checks in a row is brought up, and each time is logged (tap-guard.log);
# the tests print every entry.
tap_guard() {
	local f tap dom flags
	local -A down seen
	while sleep 2; do
		down=()
		for f in /sys/class/net/tap*/flags; do
			[ -e "$f" ] || continue
			tap=${f#/sys/class/net/} tap=${tap%/flags}
			flags=$(cat "$f" 2>/dev/null) || continue
			((flags & 1)) && continue
			down[$tap]=1
			[ -n "${seen[$tap]:-}" ] || continue
			dom=$(grep -l "<target dev='$tap'" /run/libvirt/qemu/*.xml 2>/dev/null) || continue
			dom=${dom%%$'\n'*}
			dom=$(basename "$dom" .xml)
			[ "$(virsh domstate "$dom" 2>/dev/null)" = running ] || continue
			ip link set "$tap" up &&
				echo "$(date -u +%FT%TZ) $tap of $dom (running) was down (flags $flags): brought up" >>"$log/tap-guard.log"
		done
		seen=()
		for tap in "${!down[@]}"; do seen[$tap]=1; done
	done
}
# Its own shell without -e: a check that fails is a check to skip.
(set +eE; trap - ERR; tap_guard) &
echo "tap-guard $!" >>/aa/pids
until_ok 120 "neutron answers" curl -sf http://127.0.0.1:9696/
ovs=(--config-file /etc/neutron/neutron.conf --config-file /etc/neutron/plugins/ml2/openvswitch_agent.ini)
service neutron-openvswitch-agent neutron-openvswitch-agent "${ovs[@]}"
service neutron-dhcp-agent neutron-dhcp-agent --config-file /etc/neutron/neutron.conf --config-file /etc/neutron/dhcp_agent.ini
service neutron-l3-agent neutron-l3-agent --config-file /etc/neutron/neutron.conf --config-file /etc/neutron/l3_agent.ini
until_ok 120 "glance answers" curl -sf http://127.0.0.1:9292/
until_ok 120 "placement answers" curl -sf http://127.0.0.1:8778/
until_ok 120 "nova answers" curl -sf http://127.0.0.1:8774/
until_ok 120 "barbican answers" curl -sf http://127.0.0.1:9311/

export OS_CLOUD=admin
until_ok 300 "nova-compute is up" sh -c 'openstack compute service list --service nova-compute -f value -c State | grep -qx up'
nova-manage cell_v2 discover_hosts >>$log/discover.log 2>&1
until_ok 300 "neutron agents are alive" sh -c '[ "$(openstack network agent list -f value -c Alive | grep -c True)" -ge 3 ]'

# --- What an operator sets up for Octavia ------------------------------------
# The amphorae's management network: flat on br-mgmt, where the controller
# (the health manager, the worker's REST client) is 198.51.100.1.
openstack network create --project service --provider-network-type flat --provider-physical-network mgmt lb-mgmt-net -f value -c id >/aa/mgmt-net
openstack subnet create --network lb-mgmt-net --subnet-range 198.51.100.0/26 --gateway none \
	--allocation-pool start=198.51.100.10,end=198.51.100.60 lb-mgmt-subnet >/dev/null
openstack security group create --project service lb-mgmt-sec-grp -f value -c id >/aa/mgmt-sg
openstack security group rule create --protocol tcp --dst-port 9443 "$(cat /aa/mgmt-sg)" >/dev/null
openstack security group rule create --protocol icmp "$(cat /aa/mgmt-sg)" >/dev/null
# An operator's way into an amphora (devstack sets the same up): Nova puts
# the octavia user's key pair in each amphora (amp_ssh_key_name), cloud-init
# hands it to root, and the security group lets SSH in from the management
# network. amphora-logs.sh uses it to collect what a failed test's amphorae
# saw.
ssh-keygen -q -t ed25519 -N '' -C aa-openstack-operator -f /aa/amphora-ssh-key
openstack --os-username octavia --os-project-name service keypair create \
	--public-key /aa/amphora-ssh-key.pub octavia_ssh_key >/dev/null
openstack security group rule create --protocol tcp --dst-port 22 "$(cat /aa/mgmt-sg)" >/dev/null
# The floating IPs' network: flat on br-ex, whose own port is the router
# "outside the cloud".
openstack network create --external --provider-network-type flat --provider-physical-network public public >/dev/null
openstack subnet create --network public --subnet-range 203.0.113.0/25 --gateway 203.0.113.1 --no-dhcp \
	--allocation-pool start=203.0.113.10,end=203.0.113.120 public-subnet >/dev/null
# IPv6 as devstack lays it out, which the gate suite expects: a shared
# default subnet pool whose /64s users' subnets take, and an operator's
# router "router1" between the public network and those subnets; the
# namespace routes the pool through it (IPv6 is routed, never NATed).
ip -6 address add 2001:db8:ffff::1/64 dev br-ex
openstack subnet create --network public --ip-version 6 --subnet-range 2001:db8:ffff::/64 \
	--gateway 2001:db8:ffff::1 --no-dhcp public-subnet-v6 >/dev/null
openstack subnet pool create --share --default --pool-prefix 2001:db8:8000::/48 --default-prefix-length 64 \
	shared-default-subnetpool-v6 >/dev/null
openstack router create router1 >/dev/null
openstack router set --external-gateway public router1
gw6=$(openstack router show router1 -f json -c external_gateway_info |
	python3 -c 'import json,sys; print([i["ip_address"] for i in json.load(sys.stdin)["external_gateway_info"]["external_fixed_ips"] if ":" in i["ip_address"]][0])')
ip -6 route add 2001:db8:8000::/48 via "$gw6"
openstack flavor create --id amphora --vcpus 1 --ram "${AMPHORA_RAM_MB:-1024}" --disk 3 --private --project service amphora >/dev/null
step "management and public networks, amphora flavor"
# The gate suite's web servers (member-image.sh): anyone may boot them.
if [ -e /aa/member.qcow2 ]; then
	openstack image create --disk-format qcow2 --container-format bare --public \
		--file /aa/member.qcow2 member -f value -c id >/aa/member-image
	openstack flavor create --id member --vcpus 1 --ram 256 --disk 1 --public member >/dev/null
	step "member image in glance"
fi
# Octavia boots the image tagged amphora: ours (image "amphora"), or with
# OPENSTACK_IMAGE=upstream the Python agent's (image "upstream-agent");
# with "both" the gate suite's test moves the tag for a second pass.
selected=amphora
[ "${OPENSTACK_IMAGE:-ours}" = upstream ] && selected=upstream-agent
for name in amphora upstream-agent; do
	[ -e /aa/$name.qcow2 ] || continue
	tag=()
	[ $name = $selected ] && tag=(--tag amphora)
	openstack image create --disk-format qcow2 --container-format bare --private --project service "${tag[@]}" \
		--property hw_architecture=x86_64 --file /aa/$name.qcow2 $name -f value -c id >/aa/$name-image
	step "image $name in glance${tag:+, tagged amphora}"
done
[ -e /aa/$selected-image ] || { step "no $selected image for OPENSTACK_IMAGE=${OPENSTACK_IMAGE:-ours}"; false; }

# --- Octavia ------------------------------------------------------------------
# Its CA signs each amphora's server certificate (local_cert_generator) and
# the controller's client certificate.
c=/etc/octavia/certs
# Both carry the extensions RFC 5280 asks for: the Python agent's TLS
# server (Python 3.13, whose default contexts verify strictly) refuses a
# CA without key usage or a client certificate without an authority key
# id, where Go's accepts them.
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=aa-openstack-ca -keyout $c/ca.key -out $c/ca.pem \
	-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=octavia-controller -keyout $c/client.key -out $c/client.csr 2>/dev/null
printf '%s\n' basicConstraints=CA:FALSE keyUsage=critical,digitalSignature,keyEncipherment \
	extendedKeyUsage=clientAuth subjectKeyIdentifier=hash authorityKeyIdentifier=keyid >$c/client.ext
openssl x509 -req -in $c/client.csr -CA $c/ca.pem -CAkey $c/ca.key -CAcreateserial -days 30 \
	-extfile $c/client.ext -out $c/client.crt 2>/dev/null
openssl verify -x509_strict -purpose sslclient -CAfile $c/ca.pem $c/client.crt >/dev/null
cat $c/client.crt $c/client.key >$c/client.pem
chmod 600 $c/*.key $c/client.pem
cat >/etc/octavia/octavia.conf <<EOF
[DEFAULT]
transport_url = $rabbit
# Octavia's API answers some server-side errors as 400s; its debug log
# has what was behind them.
debug = true
[api_settings]
bind_host = 127.0.0.1
bind_port = 9876
auth_strategy = keystone
default_provider_driver = amphora
enabled_provider_drivers = amphora:The Octavia Amphora driver.
[database]
connection = $(db octavia)
[health_manager]
bind_ip = 198.51.100.1
bind_port = 5555
controller_ip_port_list = 198.51.100.1:5555
heartbeat_key = aa-heartbeat-key
[controller_worker]
amphora_driver = amphora_haproxy_rest_driver
compute_driver = compute_nova_driver
network_driver = allowed_address_pairs_driver
image_driver = image_glance_driver
loadbalancer_topology = ${OCTAVIA_TOPOLOGY:-SINGLE}
amp_image_tag = amphora
amp_flavor_id = amphora
amp_boot_network_list = $(cat /aa/mgmt-net)
amp_secgroup_list = $(cat /aa/mgmt-sg)
amp_ssh_key_name = octavia_ssh_key
client_ca = $c/ca.pem
[certificates]
cert_generator = local_cert_generator
# TERMINATED_HTTPS: users' certificates from Barbican, read by the service
# user through the ACL the API sets on each secret.
cert_manager = barbican_cert_manager
barbican_auth = barbican_acl_auth
region_name = RegionOne
endpoint_type = public
ca_certificate = $c/ca.pem
ca_private_key = $c/ca.key
server_certs_key_passphrase = aa-openstack-passphrase-32-bytes
[haproxy_amphora]
client_cert = $c/client.pem
server_ca = $c/ca.pem
[nova]
enable_anti_affinity = false
[oslo_messaging]
topic = octavia_prov
[oslo_concurrency]
lock_path = /var/lock/octavia
[task_flow]
jobboard_enabled = false
$(auth keystone_authtoken octavia)
$(auth service_auth octavia)
EOF
dbsync octavia octavia-db-manage --config-file /etc/octavia/octavia.conf upgrade head
wsgi octavia-api 9876 /usr/bin/octavia-wsgi
service octavia-worker octavia-worker --config-file /etc/octavia/octavia.conf
service octavia-health-manager octavia-health-manager --config-file /etc/octavia/octavia.conf
service octavia-housekeeping octavia-housekeeping --config-file /etc/octavia/octavia.conf
until_ok 120 "octavia answers" curl -sf http://127.0.0.1:9876/
# An Octavia flavor for users who want a pair of amphorae.
openstack loadbalancer flavorprofile create --name active-standby --provider amphora \
	--flavor-data '{"loadbalancer_topology": "ACTIVE_STANDBY"}' >/dev/null
openstack loadbalancer flavor create --name active-standby --flavorprofile active-standby --enable >/dev/null

step "ready"
touch /aa/ready
# The namespace's first process: reap orphans until killed.
while :; do
	wait || true
	sleep 60
done
