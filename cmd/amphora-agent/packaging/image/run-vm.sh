#!/usr/bin/env bash
# Boots one amphora VM by hand, for debugging: the cached base image, the
# newest package from `make deb`, and a config drive with the config and
# certificates `make run` generated (under .state/), the API forwarded to
# 127.0.0.1:$PORT. Runs in the foreground; Ctrl-A X powers it off.
#
#   make deb && make run   # once, for .state/ (stop it with Ctrl-C)
#   cmd/amphora-agent/packaging/image/run-vm.sh
#   cmd/amphora-agent/packaging/image/vm-exec.py $VMDIR/qga.sock 'journalctl -u amphora-agent'
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../../.." && pwd)
state=${STATE:-$top/.state}
port=${PORT:-19443}
img=$("$here/build.sh")
deb=$(ls -t "$top"/bin/amphora-agent_*.deb | head -n1)
vmdir=${VMDIR:-$(mktemp -d /tmp/amphora-vm.XXXXXX)}
echo "VM folder: $vmdir (qga.sock, qmp.sock); API on 127.0.0.1:$port" >&2

mkdir -p "$vmdir/cd/openstack/latest" "$vmdir/cd/openstack/content" "$vmdir/pkg"
# The dev config, moved to the paths an amphora uses.
sed -e "s#^agent_server_ca = .*#agent_server_ca = /etc/octavia/certs/client_ca.pem#" \
	-e "s#^agent_server_cert = .*#agent_server_cert = /etc/octavia/certs/server.pem#" \
	-e "s#^bind_host = .*#bind_host = ::#" -e "s#^bind_port = .*#bind_port = 9443#" \
	-e "/^\(base_path\|base_cert_dir\|agent_server_network_dir\|plugged_interfaces_file\|nftables_rules_file\|haproxy_user_group_file\|network_namespace\|pci_rescan_file\) =/d" \
	"$state/amphora-agent.conf" >"$vmdir/cd/openstack/content/0000"
cp "$state/certs/server.pem" "$vmdir/cd/openstack/content/0001"
cp "$state/certs/ca.pem" "$vmdir/cd/openstack/content/0002"
cat >"$vmdir/cd/openstack/latest/meta_data.json" <<JSON
{"uuid": "$(cat /proc/sys/kernel/random/uuid)", "name": "amphora-debug", "hostname": "amphora-debug", "files": [
 {"path": "/etc/octavia/amphora-agent.conf", "content_path": "/content/0000"},
 {"path": "/etc/octavia/certs/server.pem", "content_path": "/content/0001"},
 {"path": "/etc/octavia/certs/client_ca.pem", "content_path": "/content/0002"}]}
JSON
xorriso -as mkisofs -quiet -V config-2 -J -r -o "$vmdir/config-drive.iso" "$vmdir/cd"
cp "$deb" "$vmdir/pkg/"
xorriso -as mkisofs -quiet -V amphora-pkg -J -r -o "$vmdir/pkg.iso" "$vmdir/pkg"
[ -f "$vmdir/disk.qcow2" ] || qemu-img create -q -f qcow2 -b "$img/base.qcow2" -F qcow2 "$vmdir/disk.qcow2"

exec qemu-system-x86_64 -M pc -accel tcg -m 1024 -smp 1 -nographic \
	-drive "file=$vmdir/disk.qcow2,if=none,id=root,format=qcow2" -device virtio-blk-pci,drive=root,bootindex=0 \
	-drive "file=$vmdir/config-drive.iso,if=virtio,format=raw,readonly=on" \
	-drive "file=$vmdir/pkg.iso,if=virtio,format=raw,readonly=on" \
	-netdev "user,id=mgmt,net=192.0.2.0/24,hostfwd=tcp:127.0.0.1:$port-:9443" \
	-device virtio-net-pci,netdev=mgmt,mac=52:54:00:c0:00:02,addr=3 \
	-chardev "socket,id=qga,path=$vmdir/qga.sock,server=on,wait=off" \
	-device virtio-serial -device virtserialport,chardev=qga,name=org.qemu.guest_agent.0 \
	-qmp "unix:$vmdir/qmp.sock,server=on,wait=off"
