#!/usr/bin/env bash
# Where the tests built under one tag live, read from the build lines, for
# the targets of tiers whose tag also guards tests outside their package
# (make test-system and test-interop) and for the flake hunt.
#
# usage: tagged.sh pkgs|run TAG
#   pkgs  the packages (./dir/, one a line, from the repository's root)
#         holding a test file whose build line is `//go:build TAG`;
#   run   a -run pattern naming every Test function those files define.
#
# Together they run each test of the tag once, in its tier's package and
# elsewhere (agent/network_system_test.go, say), and no unit test of those
# packages again.
set -euo pipefail

usage="usage: tagged.sh pkgs|run TAG"
what=${1:?$usage}
tag=${2:?$usage}
cd "$(dirname "$0")/../../.."

mapfile -t files < <(grep -rlx --include='*_test.go' --exclude-dir=testdata --exclude-dir=.git "//go:build $tag" . | sort)
if ((${#files[@]} == 0)); then
	echo "tagged.sh: no test file has the build line //go:build $tag" >&2
	exit 1
fi
case $what in
pkgs) printf '%s\n' "${files[@]}" | xargs -n1 dirname | sort -u | sed 's|$|/|' ;;
run) sed -n 's/^func \(Test[A-Za-z0-9_]*\)(.*/\1/p' "${files[@]}" | grep -vx TestMain | sort -u | paste -sd'|' | sed 's/.*/^(&)$/' ;;
*)
	echo "$usage" >&2
	exit 2
	;;
esac
