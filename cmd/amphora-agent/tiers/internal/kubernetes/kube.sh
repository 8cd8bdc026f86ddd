#!/bin/bash
# The Kubernetes tier's side inside the real-OpenStack tier's cloud (run
# there through cloud.sh exec; inside.sh puts it and the tools at
# /aa/kube.sh and /aa/kube-tools when AMPHORA_KUBE_TOOLS names
# kube-tools.sh's folder). A cluster without kubelets: etcd (Debian's, in
# the root), kube-apiserver and the real openstack-cloud-controller-manager
# running nothing but its service controller; "nodes" are network
# namespaces plugged into Neutron ports the way Neutron's own agents plug
# theirs.
#
#   kube.sh up SUBNET_ID FLOATING_NETWORK_ID   configure and start the three,
#                                              wait for the API server
#   kube.sh node NAME PORT_ID MAC IP/LEN GW    a node's namespace on its port
#   kube.sh serve NAME PORT                    the node's NodePort server
#                                              (answers with NAME)
#   kube.sh health NAME PORT CODE              kube-proxy's health check
#                                              stand-in: /healthz answers CODE
#
# Everything started here is a child of the cloud's PID namespace and
# ends with it; logs go to /var/log/aa/ with the services'.
set -euo pipefail

tools=/aa/kube-tools
etc=/etc/kubernetes
log=/var/log/aa
pw=aa-secret
# The test server octavia-tempest-plugin copies onto its members.
test_server=/usr/lib/python3/dist-packages/octavia_tempest_plugin/contrib/test_server/test_server.bin

# background NAME CMD…: started in a session of its own, output to the log.
background() {
	local name=$1
	shift
	setsid "$@" >>"$log/$name.log" 2>&1 </dev/null &
}

# kubeconfig TOKEN: a kubeconfig for the API server on loopback.
kubeconfig() {
	cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kube
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: user
  user:
    token: $1
contexts:
- name: kube
  context: {cluster: kube, user: user}
current-context: kube
EOF
}

up() {
	local subnet=${1:?subnet id} floating=${2:?floating network id}
	mkdir -p $etc /var/lib/kube-etcd /var/lib/kube-apiserver
	openssl genrsa -out $etc/sa.key 2048 2>/dev/null
	openssl rsa -in $etc/sa.key -pubout -out $etc/sa.pub 2>/dev/null
	local ccm test
	ccm=$(openssl rand -hex 16) test=$(openssl rand -hex 16)
	# Two users, both cluster administrators: the CCM and the test (kubectl).
	printf '%s,ccm,ccm,system:masters\n%s,test,test,system:masters\n' "$ccm" "$test" >$etc/tokens.csv
	kubeconfig "$ccm" >$etc/ccm.kubeconfig
	kubeconfig "$test" >$etc/admin.kubeconfig
	mkdir -p /root/.kube
	cp $etc/admin.kubeconfig /root/.kube/config
	# The CCM acts as the cloud's demo user (member role only), on the
	# cluster's subnet, floating IPs from the public network.
	cat >$etc/cloud.conf <<EOF
[Global]
auth-url = http://127.0.0.1:5000/v3
username = demo
password = $pw
tenant-name = demo
domain-name = Default
region = RegionOne

[LoadBalancer]
subnet-id = $subnet
floating-network-id = $floating
lb-method = ROUND_ROBIN
create-monitor = yes
monitor-delay = 5s
monitor-timeout = 3s
monitor-max-retries = 1
EOF

	background kube-etcd etcd --name kube --data-dir /var/lib/kube-etcd \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster kube=http://127.0.0.1:2380
	local t0
	t0=$(date +%s)
	until curl -sf http://127.0.0.1:2379/health >/dev/null; do
		[ $(($(date +%s) - t0)) -lt 60 ] || { echo "kube.sh: etcd not up within 60 s" >&2; tail -20 $log/kube-etcd.log >&2; exit 1; }
		sleep 0.5
	done
	# The API server's own certificate is self-signed in its cert-dir; the
	# clients skip its verification (loopback only).
	background kube-apiserver $tools/kube-apiserver --etcd-servers http://127.0.0.1:2379 \
		--bind-address 127.0.0.1 --secure-port 6443 --advertise-address 203.0.113.1 \
		--cert-dir /var/lib/kube-apiserver --token-auth-file $etc/tokens.csv --authorization-mode RBAC \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file $etc/sa.pub \
		--service-account-signing-key-file $etc/sa.key --service-cluster-ip-range 10.96.0.0/24
	t0=$(date +%s)
	until kubectl get --raw /readyz >/dev/null 2>&1; do
		[ $(($(date +%s) - t0)) -lt 180 ] || { echo "kube.sh: the API server not ready within 180 s" >&2; tail -20 $log/kube-apiserver.log >&2; exit 1; }
		sleep 0.5
	done
	# Only the service controller: the node controllers would delete every
	# Node that is not a Nova server, and there are no routes to manage.
	background kube-ccm $tools/openstack-cloud-controller-manager --cloud-provider openstack \
		--cloud-config $etc/cloud.conf --kubeconfig $etc/ccm.kubeconfig --controllers service \
		--leader-elect=false --secure-port 0 --cluster-name kube --configure-cloud-routes=false --v 2
	echo "kube.sh: etcd, kube-apiserver and the CCM started; API server ready in $(($(date +%s) - t0)) s"
}

# node NAME PORT MAC IP/LEN GW: the namespace NAME with eth0 (MAC, IP) on
# a veth whose other end is on br-int, named after the Neutron port so
# that the Open vSwitch agent wires it (local VLAN, security group flows)
# and reports it ACTIVE. A veth, not an internal port: on the userspace
# datapath an internal port moved into another namespace passes nothing.
node() {
	local name=$1 port=$2 mac=$3 addr=$4 gw=$5 host
	host=kv-${port:0:11}
	ip netns add "$name"
	ip link add "$host" type veth peer name kn-eth0 netns "$name"
	ip netns exec "$name" sh -e -c "
		ip link set lo up
		ip link set kn-eth0 name eth0
		ip link set eth0 address $mac
		ip address add $addr dev eth0
		ip link set eth0 up
		ip route add default via $gw
		ethtool -K eth0 tx off >/dev/null"
	# The userspace datapath does not complete checksums a veth leaves
	# partial: none leave either end unfinished.
	ethtool -K "$host" tx off >/dev/null
	ip link set "$host" up
	ovs-vsctl add-port br-int "$host" -- set Interface "$host" \
		external-ids:iface-id="$port" external-ids:attached-mac="$mac" external-ids:iface-status=active
}

serve() {
	local name=$1 port=$2
	ip netns exec "$name" setsid $test_server -port "$port" -id "$name" >>"$log/kube-node-$name.log" 2>&1 </dev/null &
}

# health NAME PORT CODE: what kube-proxy answers on a Service's
# healthCheckNodePort: 200 where the node has a local endpoint, 503 where
# it has none.
health() {
	local name=$1 port=$2 code=$3
	ip netns exec "$name" setsid python3 -c '
import http.server, sys
code = int(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"{\"localEndpoints\": %d}\n" % (1 if code == 200 else 0)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("", int(sys.argv[1])), H).serve_forever()
' "$port" "$code" >>"$log/kube-node-$name.log" 2>&1 </dev/null &
}

cmd=${1:?usage: kube.sh up|node|serve|health …}
shift
case "$cmd" in
up | node | serve | health) "$cmd" "$@" ;;
*) echo "kube.sh: unknown command $cmd" >&2; exit 2 ;;
esac
