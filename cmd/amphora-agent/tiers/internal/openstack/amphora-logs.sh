#!/usr/bin/env bash
# Inside the cloud: saves what every live amphora sees, through the
# operator's SSH key (boot.sh), to /var/log/aa/amphorae/<amphora id>.log,
# which the tier keeps with the services' logs of a failed run. Nova's
# console log of an amphora ends with its early boot; the agent's journal,
# the namespace's addresses, routes, IPVS table and nftables rules are
# where a load balancer that takes no traffic is explained.
#
# Usage: amphora-logs.sh   (replaces each amphora's file; an amphora
# that does not answer SSH within a minute keeps its previous file)
set -uo pipefail
out=/var/log/aa/amphorae
mkdir -p "$out"
export OS_CLOUD=admin
openstack loadbalancer amphora list -f value -c id -c lb_network_ip 2>/dev/null |
	while read -r id ip; do
		[ -n "${ip:-}" ] && [ "$ip" != None ] || continue
		# The amphora's side runs in its own shell: the quoted here-document
		# is its command line, and nothing of it is expanded here.
		timeout 60 ssh -n -i /aa/amphora-ssh-key -o BatchMode=yes -o StrictHostKeyChecking=no \
			-o UserKnownHostsFile=/dev/null -o ConnectTimeout=10 -o LogLevel=ERROR "root@$ip" \
			"$(cat <<'EOF'
section() { printf '\n=== %s\n' "$*"; "$@" 2>&1; }
ns() { ip netns exec amphora-haproxy "$@"; }
echo "amphora $(hostname) at $(date -u +%FT%TZ), up $(cut -d' ' -f1 /proc/uptime) s"
section journalctl -b --no-pager -o short-precise -u amphora-agent -n 300
section journalctl -b --no-pager -o short-precise -p warning -n 100
section ps -eo pid,rss,etime,args --sort=pid
section ns ip -d address
section ns ip rule
section ns ip -6 rule
section ns ip route show table all
section ns ip -6 route show table all
section ns ip neigh
section ns ipvsadm -Ln --stats
section ns nft list ruleset
section ns nstat -a
section find /var/lib/octavia -maxdepth 3 -type f -printf '%TT %s %p\n'
EOF
)" >"$out/$id.log.new" 2>&1 && mv "$out/$id.log.new" "$out/$id.log" || rm -f "$out/$id.log.new"
	done
