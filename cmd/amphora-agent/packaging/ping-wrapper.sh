#!/bin/sh
# ping-wrapper.sh: the external check of PING health monitors.
#
# Octavia's HAProxy template runs /var/lib/octavia/ping-wrapper.sh with
# `option external-check`. HAProxy passes the member in its environment
# (HAPROXY_SERVER_ADDR; also the third argument) with an empty PATH, so
# every program is named by its full path. One echo request, one second
# to answer: exit 0 when the member answers (UP), ping's non-zero status
# otherwise (1: no answer, 2: an error such as an unusable address).
addr=${HAPROXY_SERVER_ADDR:-${3:-}}
if [ -z "$addr" ]; then
	echo "ping-wrapper.sh: no member address (HAPROXY_SERVER_ADDR)" >&2
	exit 2
fi
# An IPv6 address has a colon; an IPv4 address or a name has none.
case $addr in
*:*) family=-6 ;;
*) family=-4 ;;
esac
exec /bin/ping "$family" -q -n -c 1 -w 1 -- "$addr" >/dev/null 2>&1
