#!/bin/sh
# Runs one of Octavia's commands from another release's root file system
# (octavia-root.sh) in the cloud tier: a mount namespace of its own with a
# fresh root made of the Octavia root's /usr and /etc (read-only: the
# cached root stays as built), /proc and /dev, an empty /tmp and /run, and
# the test's folder (config, certificates, logs, the fabric's socket) and
# the drivers at their host paths; the network namespace is the caller's.
#
# Usage: octavia-sandbox.sh ROOT DIR DRIVERS COMMAND [ARG...]
#
# Every step execs (unshare without --fork, chroot, sh), so COMMAND keeps
# the pid and the process group the tier started: cotyledon's setsid then
# fails as it does on the host, and stopping the group stops all of it.
# The mounts go away with the last process of the namespace.
set -eu
if [ -z "${AMPHORA_OCTAVIA_SANDBOX:-}" ]; then
	AMPHORA_OCTAVIA_SANDBOX=1 exec unshare --mount --propagation private "$0" "$@"
fi
unset AMPHORA_OCTAVIA_SANDBOX
root=$1 dir=$2 drivers=$3
shift 3
new=$dir/sandbox/$$
mkdir -p "$new"
mount -t tmpfs -o mode=0755 sandbox "$new"
for d in usr etc; do
	mkdir "$new/$d"
	mount --bind -o ro "$root/$d" "$new/$d"
done
for d in bin sbin lib lib64; do
	ln -s "usr/$d" "$new/$d"
done
mkdir "$new/proc" "$new/dev" "$new/tmp" "$new/run" "$new/root"
mount --rbind /proc "$new/proc"
mount --rbind /dev "$new/dev"
mount -t tmpfs -o mode=1777 tmp "$new/tmp"
mount -t tmpfs -o mode=0755 run "$new/run"
mkdir -p "$new$dir" "$new$drivers"
mount --bind "$dir" "$new$dir"
mount --bind -o ro "$drivers" "$new$drivers"
# chroot changes to /; the command runs where the tier started it.
exec chroot "$new" /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$PWD" "$@"
