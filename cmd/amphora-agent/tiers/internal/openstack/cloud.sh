#!/usr/bin/env bash
# The real-OpenStack tier's cloud, seen from the host: one throwaway
# OpenStack in namespaces of its own.
#
#   cloud.sh up DIR ROOT     start it (ROOT: openstack-root.sh's folder) and
#                            wait until every service answers
#   cloud.sh run DIR ROOT    the same in the foreground, without waiting: the
#                            cloud lives as long as this process (tests)
#   cloud.sh exec DIR CMD…   run CMD inside it (its root, network, PIDs)
#   cloud.sh down DIR        stop everything it started and remove DIR
#
# Everything runs under one PID namespace whose first process is
# inside.sh: killing it kills every service, guest and helper at once,
# and the mount namespace with the root's overlay goes with the last of
# them, so "down" cannot miss anything a failed step left. unshare's
# --kill-child does the same if this script or its caller dies first.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?usage: cloud.sh up|exec|down DIR …}
dir=${2:?usage: cloud.sh up|exec|down DIR …}
shift 2

# init_pid prints the host pid of the namespace's first process.
init_pid() {
	local u
	u=$(cat "$dir/unshare.pid" 2>/dev/null) || return 1
	[ -r "/proc/$u/task/$u/children" ] || return 1
	awk '{print $1}' "/proc/$u/task/$u/children" | grep . || return 1
}

case "$cmd" in
run)
	root=${1:?usage: cloud.sh run DIR ROOT}
	[ -e "$root/.complete" ] || { echo "cloud.sh: $root is not a finished openstack-root.sh build" >&2; exit 1; }
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	echo $$ >"$dir/unshare.pid"
	exec unshare --pid --fork --kill-child --mount --uts --ipc --net --propagation private \
		"$here/inside.sh" "$dir" "$root" "$here" </dev/null >"$dir/inside.log" 2>&1
	;;
up)
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	timeout=${OPENSTACK_UP_TIMEOUT:-1200}
	# setsid: its own session, so a terminal's signals reach only the caller.
	setsid "$0" run "$dir" "$@" &
	start=$(date +%s)
	until [ -s "$dir/unshare.pid" ]; do sleep 0.1; done
	state=$dir/upper/aa
	while :; do
		if [ -e "$state/ready" ]; then
			echo "cloud.sh: up in $(($(date +%s) - start))s" >&2
			exit 0
		fi
		if [ -e "$state/failed" ] || ! kill -0 "$(cat "$dir/unshare.pid")" 2>/dev/null; then
			echo "cloud.sh: the cloud did not come up:" >&2
			tail -40 "$dir/inside.log" >&2
			exit 1
		fi
		if [ $(($(date +%s) - start)) -gt "$timeout" ]; then
			echo "cloud.sh: not up within ${timeout}s:" >&2
			tail -40 "$dir/inside.log" >&2
			exit 1
		fi
		sleep 1
	done
	;;
exec)
	pid=$(init_pid) || { echo "cloud.sh: no cloud runs in $dir" >&2; exit 1; }
	# The cloud's root and working folder are the first process's.
	exec nsenter -t "$pid" -m -u -i -n -p -r -w env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
		LANG=C.UTF-8 OS_CLOUD=${OS_CLOUD:-admin} "$@"
	;;
down)
	if u=$(cat "$dir/unshare.pid" 2>/dev/null) && kill -0 "$u" 2>/dev/null; then
		pid=$(init_pid || true)
		kill -KILL "$u" 2>/dev/null || true
		[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
		# The namespace's last process takes the overlay with it.
		for _ in $(seq 1 300); do
			alive=
			kill -0 "$u" 2>/dev/null && alive=1
			[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && alive=1
			[ -z "$alive" ] && break
			sleep 0.1
		done
	fi
	if [ -d "$dir" ]; then
		if findmnt -rn -o TARGET | grep -qF "$dir/"; then
			echo "cloud.sh: something is still mounted under $dir; left in place" >&2
			exit 1
		fi
		rm -rf "$dir"
	fi
	;;
*)
	echo "cloud.sh: unknown command $cmd" >&2
	exit 2
	;;
esac
