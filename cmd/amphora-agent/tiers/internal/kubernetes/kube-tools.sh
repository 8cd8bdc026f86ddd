#!/usr/bin/env bash
# Builds the Kubernetes tier's two Go tools from the pinned module in
# tools/: the real openstack-cloud-controller-manager
# (k8s.io/cloud-provider-openstack v1.34.1) and kube-apiserver
# (k8s.io/kubernetes v1.34.1). Debian packages etcd and kubectl (the
# OpenStack root has them) but neither of these.
#
# Usage: kube-tools.sh [cache-dir]   (default /var/tmp/amphora-agent-image)
# Prints the folder holding both binaries, kube-tools-<key>, the key a
# hash of tools/go.mod, tools/go.sum, this script and the Go version:
# same inputs, no build. A .complete marker says the folder is whole; a
# flock makes a second caller wait for the first's build. One package is
# compiled at a time (-p 1): the machine is shared.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-${AMPHORA_IMAGE_CACHE:-/var/tmp/amphora-agent-image}}
go=${GO:-go}
version=v1.34.1
key=$({ "$go" version; cat "$here/tools/go.mod" "$here/tools/go.sum" "$0"; } | sha256sum | cut -c1-16)
out=$cache/kube-tools-$key
[ -f "$out/.complete" ] && { echo "$out"; exit 0; }
mkdir -p "$cache"
exec 9>"$cache/.kube-tools.lock"
flock 9
[ -f "$out/.complete" ] && { echo "$out"; exit 0; }
work=$(mktemp -d "$cache/kube-tools.XXXXXX")
# shellcheck disable=SC2064 # $work is fixed now
trap "rm -rf '$work'" EXIT

# What `kubectl version` and the API server's /version report; both
# components read it from component-base.
v=k8s.io/component-base/version
ldflags="-s -w -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=34 -X $v.gitTreeState=clean"
ldflags+=" -X k8s.io/cloud-provider-openstack/pkg/version.Version=$version"
start=$(date +%s)
(cd "$here/tools" && CGO_ENABLED=0 GOFLAGS=-mod=readonly "$go" build -p 1 -trimpath -ldflags "$ldflags" -o "$work/" \
	k8s.io/cloud-provider-openstack/cmd/openstack-cloud-controller-manager \
	k8s.io/kubernetes/cmd/kube-apiserver) >&2
echo "kube-tools.sh: built in $(($(date +%s) - start)) s:" $(cd "$work" && du -h openstack-cloud-controller-manager kube-apiserver | tr '\t\n' '  ') >&2
rm -rf "$out"
mv "$work" "$out"
chmod 755 "$out"
trap - EXIT
touch "$out/.complete"
echo "$out"
