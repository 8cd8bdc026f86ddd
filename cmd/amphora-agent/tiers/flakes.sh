#!/usr/bin/env bash
# The flake hunt behind `make flakes` (see the Makefile): the unit tier
# UNIT times while a busy loop holds each core, then the system tier SYSTEM
# times; then each test that failed at least once, with its count and the
# output of its first failure. Exits 1 when any test failed.
#
# usage: flakes.sh UNIT SYSTEM AGENT_BIN
# environment: GO (the go command), FLAKES_BUSY_MAX (seconds a busy loop
# may live at most, per unit run), FLAKES_LOGS (a folder that keeps each
# run's go test -json output).
set -uo pipefail

unit=${1:?usage: flakes.sh UNIT SYSTEM AGENT_BIN}
system=${2:?usage: flakes.sh UNIT SYSTEM AGENT_BIN}
bin=${3:?usage: flakes.sh UNIT SYSTEM AGENT_BIN}
go=${GO:-go}
busy_max=${FLAKES_BUSY_MAX:-1800}
logs=${FLAKES_LOGS:-}

command -v jq >/dev/null || { echo "flakes: needs jq (apt-get install jq)" >&2; exit 2; }
cd "$(dirname "$0")/../../.." || exit 2

work=$(mktemp -d)
busy=()
gotest=
stop_busy() {
	if ((${#busy[@]})); then
		kill "${busy[@]}" 2>/dev/null
		wait "${busy[@]}" 2>/dev/null
	fi
	busy=()
}
trap 'stop_busy; [ -z "$gotest" ] || kill -- -"$gotest" 2>/dev/null; rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# One spinning shell per core. Each also ends by itself after busy_max
# seconds, or soon after this script is gone (even killed by SIGKILL, when
# no trap runs), so none outlives the hunt.
start_busy() {
	local me=$$ n
	for ((n = 0; n < $(nproc); n++)); do
		(
			end=$((SECONDS + busy_max))
			for ((i = 1; ; i++)); do
				if ((i % 200000 == 0)); then
					((SECONDS < end)) && kill -0 "$me" 2>/dev/null || exit 0
				fi
			done
		) &
		busy+=($!)
	done
}

# run TIER I COMMAND... runs one go test -json and appends what failed to
# $work/failures (tier, package, test; "-" for a package that failed with
# no failed test: build failure, panic outside a test, time-out), keeping
# the first failure's output of each in $work/first/.
run() {
	local tier=$1 i=$2 log=$work/$1-$2.json began=$SECONDS rc
	shift 2
	# In a session of its own, waited for in the background: a signal to
	# this script runs its traps at once, and they end the whole run.
	setsid "$@" -json >"$log" 2>"$work/stderr" &
	gotest=$!
	wait "$gotest"
	rc=$?
	gotest=
	# Package and test of every fail event; a failed build names its
	# package in ImportPath only.
	jq -r 'select(.Action == "fail") | [(.Package // .ImportPath), (.Test // "-")] | @tsv' "$log" 2>/dev/null |
		sort -u >"$work/run"
	# A package's own fail event only counts when none of its tests failed.
	awk -F'\t' '$2 != "-" { t[$1] = 1 } { l[NR] = $0; p[NR] = $1; s[NR] = $2 }
		END { for (k = 1; k <= NR; k++) if (s[k] != "-" || !(p[k] in t)) print l[k] }' "$work/run" >"$work/run.counted"
	if ((rc != 0)) && [ ! -s "$work/run.counted" ]; then
		printf '%s\t%s\t%s\n' "$tier" "(go-test)" "exit-status-$rc" >>"$work/failures"
		[ -e "$work/first/$tier-go" ] || { echo "=== $tier run $i: go test exited $rc"; tail -n 40 "$work/stderr"; } >"$work/first/$tier-go"
	fi
	local n=0 pkg test key
	while IFS=$'\t' read -r pkg test; do
		n=$((n + 1))
		printf '%s\t%s\t%s\n' "$tier" "$pkg" "$test" >>"$work/failures"
		key=$(printf '%s %s %s' "$tier" "$pkg" "$test" | md5sum | cut -c1-16)
		[ -e "$work/first/$key" ] && continue
		{
			echo "=== $tier run $i: $pkg $test"
			# The package's shuffle seed, to replay its order with -shuffle;
			# then the test's output, or the package's own and its failed
			# build's.
			jq -j --arg p "$pkg" 'select(.Action == "output" and .Package == $p and .Test == null
				and (.Output | startswith("-test.shuffle"))) | .Output' "$log" | head -n 1
			jq -j -s --arg p "$pkg" --arg t "$test" '
				(map(select(.Action == "fail" and .Package == $p and .Test == null)) | .[0].FailedBuild // "") as $build
				| .[] | select((.Action == "build-output" and $build != "" and .ImportPath == $build)
					or (.Action == "output" and .Package == $p and (if $t == "-" then .Test == null
						else .Test == $t or (.Test // "" | startswith($t + "/")) end))) | .Output' "$log" >"$work/out"
			# A long output (a test's dump of state) keeps its file:line
			# messages and its end.
			if (($(wc -l <"$work/out") <= 60)); then
				cat "$work/out"
			else
				grep -E -m 20 '^[[:space:]]+[^[:space:]]+\.go:[0-9]+: ' "$work/out"
				echo "[...]"
				tail -n 30 "$work/out"
			fi
		} >"$work/first/$key"
	done <"$work/run.counted"
	if [ -n "$logs" ]; then
		mkdir -p "$logs" && cp "$log" "$logs/"
	fi
	rm -f "$log"
	echo "flakes: $tier run $i: $n failed, $((SECONDS - began))s"
}

mkdir -p "$work/first"
: >"$work/failures"
system_ran=0
for ((i = 1; i <= unit; i++)); do
	start_busy
	run unit "$i" "$go" test -race -shuffle=on -count=1 ./...
	stop_busy
done
# The system tier as make test-system runs it: its package and the system
# tests of other packages, each once (tagged.sh).
if ((system > 0)) && [ "$(id -u)" != 0 ]; then
	echo "flakes: system tier skipped: needs root (network namespaces)"
elif ((system > 0)); then
	system_run=$(cmd/amphora-agent/tiers/tagged.sh run system) || exit 2
	pkgs=$(cmd/amphora-agent/tiers/tagged.sh pkgs system) || exit 2
	mapfile -t system_pkgs <<<"$pkgs"
	for ((i = 1; i <= system; i++)); do
		run system "$i" env AMPHORA_AGENT_BIN="$bin" "$go" test -count=1 -tags system -p 1 -run "$system_run" -skip '^TestDemo$' "${system_pkgs[@]}"
		system_ran=$i
	done
fi

echo
echo "flakes: unit tier: $unit runs of go test -race -shuffle=on -count=1 ./... beside $(nproc) busy loops"
echo "flakes: system tier: $system_ran runs of go test -count=1 -tags system -p 1 -skip '^TestDemo\$' with tagged.sh's -run and packages, as make test-system"
if [ ! -s "$work/failures" ]; then
	echo "flakes: no test failed"
	exit 0
fi
echo "flakes: failed at least once (tier, failed runs/runs, package, test; \"-\" is the package itself: build failure, panic or time-out):"
LC_ALL=C sort "$work/failures" | uniq -c | sort -k2,2 -k1,1nr | while read -r count tier pkg test; do
	runs=$unit
	[ "$tier" = system ] && runs=$system_ran
	printf '  %-6s %3d/%-3d %s %s\n' "$tier" "$count" "$runs" "$pkg" "$test"
done
echo
echo "flakes: the first failure of each (a subtest's is in its parent's):"
cat "$work/first"/*-go 2>/dev/null
parent_of= parent=
LC_ALL=C sort -u "$work/failures" | grep -v $'\t(go-test)\t' | while IFS=$'\t' read -r tier pkg test; do
	if [ "$tier $pkg" = "$parent_of" ] && [[ $test == "$parent"/* ]]; then
		continue
	fi
	parent_of="$tier $pkg" parent=$test
	cat "$work/first/$(printf '%s %s %s' "$tier" "$pkg" "$test" | md5sum | cut -c1-16)"
done
exit 1
