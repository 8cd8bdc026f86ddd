#!/bin/sh
# lvs-masquerade.sh add|delete ipv4|ipv6 INTERFACE [sriov]
#
# The up/down script interface files name for LVS (UDP and SCTP)
# listeners, with upstream's arguments, tables and chains: masquerade UDP
# and SCTP leaving INTERFACE, and (unless sriov) keep TCP on it out of
# conntrack. Unlike upstream's, `add` replaces the interface's rules
# instead of appending another set, and `delete` removes only this
# interface's rules (upstream flushes the chains of every interface).
# Each call is one nft transaction. Needs nft (no iptables fallback).
set -eu
# Character ranges below are byte ranges whatever the caller's locale.
export LC_ALL=C

usage() {
	echo "usage: ${0##*/} add|delete ipv4|ipv6 INTERFACE [sriov]" >&2
	exit 1
}

[ $# -eq 3 ] || [ $# -eq 4 ] || usage
action=$1 iface=$3 sriov=${4-}
case $action in add | delete) ;; *) usage ;; esac
case $2 in
ipv4) family=ip table=octavia-ipv4 prefix=ip ;;
ipv6) family=ip6 table=octavia-ipv6 prefix=ip6 ;;
*) usage ;;
esac
[ -z "$sriov" ] || [ "$sriov" = sriov ] || usage
# Only an interface name: the kernel takes 1 to 15 bytes, not "." or
# "..", and the characters the amphora's names use are enough here. Any
# other would be read by nft as a wildcard ("e*"), or break the rule text
# or the matching of other interfaces' rules (a quote, a newline).
bad_name() {
	printf '%s: invalid interface name "%s": want 1 to 15 letters, digits, "-", "_" or "."\n' "${0##*/}" "$iface" >&2
	exit 2
}
case $iface in '' | . | .. | *[!0-9A-Za-z_.-]*) bad_name ;; esac
[ ${#iface} -le 15 ] || bad_name
command -v nft >/dev/null 2>&1 || {
	echo "${0##*/}: nft not found" >&2
	exit 1
}

chains="$prefix-udp-masq $prefix-sctp-masq prerouting output"

# rules lists the chain's rules naming the interface, one handle a line.
rules() {
	nft -a list chain "$family" "$table" "$1" 2>/dev/null |
		grep -F -e "oifname \"$iface\" " -e "iifname \"$iface\" " |
		sed -n 's/.*# handle \([0-9][0-9]*\)$/\1/p'
}

# stale prints the commands that delete the interface's rules.
stale() {
	for c in $chains; do
		for h in $(rules "$c"); do
			echo "delete rule $family $table $c handle $h"
		done
	done
}

if [ "$action" = add ]; then
	{
		echo "add table $family $table"
		for proto in udp sctp; do
			echo "add chain $family $table $prefix-$proto-masq { type nat hook postrouting priority 100; }"
		done
		stale
		for proto in udp sctp; do
			echo "add rule $family $table $prefix-$proto-masq oifname \"$iface\" meta l4proto $proto masquerade"
		done
		if [ -z "$sriov" ]; then
			echo "add chain $family $table prerouting { type filter hook prerouting priority -300; }"
			echo "add rule $family $table prerouting iifname \"$iface\" meta l4proto tcp notrack"
			echo "add chain $family $table output { type filter hook output priority -300; }"
			echo "add rule $family $table output oifname \"$iface\" meta l4proto tcp notrack"
		fi
	} | nft -f -
	exit 0
fi

cmds=$(stale)
[ -z "$cmds" ] || echo "$cmds" | nft -f -
# Chains (and then the table) no interface uses any more go too, so the
# last delete leaves the namespace as before the first add.
for c in $chains; do
	listing=$(nft -a list chain "$family" "$table" "$c" 2>/dev/null) || continue
	if ! echo "$listing" | grep -v '{' | grep -q '# handle'; then
		nft delete chain "$family" "$table" "$c"
	fi
done
if nft list table "$family" "$table" >/dev/null 2>&1 &&
	! nft list table "$family" "$table" | grep -q '^[[:space:]]*chain '; then
	nft delete table "$family" "$table"
fi
