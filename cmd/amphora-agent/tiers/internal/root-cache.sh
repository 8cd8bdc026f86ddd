# Sourced by the root file system builders (cloud/octavia-root.sh,
# openstack/openstack-root.sh): the cache they share. Each root is built
# once under CACHE as NAME-SUITE-KEY, KEY a hash of the suite and of the
# files that shape it; a .complete marker says it is whole, and a flock
# per NAME and SUITE makes a second caller wait for the first's build.

# root_cache NAME SUITE CACHE INPUT...: prints the root's folder and
# exits if it is built; else takes the lock and sets out (the folder)
# and work (a scratch folder, removed at exit, where the builder makes
# $work/root).
root_cache() {
	local name=$1 suite=$2 cache=$3 key
	shift 3
	key=$({ echo "$suite"; cat "$@"; } | sha256sum | cut -c1-16)
	out=$cache/$name-$suite-$key
	[ -f "$out/.complete" ] && { echo "$out"; exit 0; }
	mkdir -p "$cache"
	exec 9>"$cache/.$name-$suite.lock"
	flock 9
	[ -f "$out/.complete" ] && { echo "$out"; exit 0; }
	command -v mmdebstrap >/dev/null || { echo "$name.sh: mmdebstrap is missing (make deps installs it)" >&2; exit 1; }
	work=$(mktemp -d "$cache/$name.XXXXXX")
	# shellcheck disable=SC2064 # $work is fixed now
	trap "rm -rf '$work'" EXIT
}

# root_done: moves $work/root to $out, marks it whole and prints it.
root_done() {
	rm -rf "$out"
	mv "$work/root" "$out"
	touch "$out/.complete"
	echo "$out"
}
