# How testdata was recorded: Debian bookworm amphora image (kernel 6.1.0-57-amd64,
# ipvsadm 1.31) under QEMU, this script run as root through the guest agent, then
#   ip netns exec lb cat /proc/net/ip_vs          > proc_net_ip_vs.txt
#   ip netns exec lb ipvsadm -Ln --stats --exact  > ipvsadm_stats_exact.txt
set -e
ip netns add lb; ip netns add cl; ip netns add mb
ip link add v-c type veth peer name v-cl; ip link set v-c netns lb; ip link set v-cl netns cl
ip link add v-m type veth peer name v-mb; ip link set v-m netns lb; ip link set v-mb netns mb
ip -n lb addr add 203.0.113.10/24 dev v-c; ip -n lb addr add 2001:db8::10/64 dev v-c nodad
ip -n lb addr add 198.51.100.1/24 dev v-m; ip -n lb addr add 2001:db8:1::1/64 dev v-m nodad
ip -n cl addr add 203.0.113.1/24 dev v-cl; ip -n cl addr add 2001:db8::1/64 dev v-cl nodad
ip -n mb addr add 198.51.100.31/24 dev v-mb; ip -n mb addr add 198.51.100.32/24 dev v-mb; ip -n mb addr add 2001:db8:1::31/64 dev v-mb nodad
for n in lb cl mb; do ip -n $n link set lo up; for l in $(ip -n $n -o link | awk -F': ' '{print $2}' | cut -d@ -f1 | grep v-); do ip -n $n link set $l up; done; done
ip -n cl route add default via 203.0.113.10; ip -n cl -6 route add default via 2001:db8::10
ip -n mb route add default via 198.51.100.1; ip -n mb -6 route add default via 2001:db8:1::1
ip netns exec lb sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 net.ipv4.vs.conntrack=1
ip netns exec lb ipvsadm -A -u 203.0.113.10:53 -s rr
ip netns exec lb ipvsadm -a -u 203.0.113.10:53 -r 198.51.100.31:53 -m -w 1
ip netns exec lb ipvsadm -a -u 203.0.113.10:53 -r 198.51.100.32:53 -m -w 0
ip netns exec lb ipvsadm -A -u [2001:db8::10]:53 -s wrr
ip netns exec lb ipvsadm -a -u [2001:db8::10]:53 -r [2001:db8:1::31]:53 -m -w 3
ip netns exec lb ipvsadm -A --sctp-service 203.0.113.10:3868 -s sh -p 360
ip netns exec lb ipvsadm -a --sctp-service 203.0.113.10:3868 -r 198.51.100.31:3868 -m -w 1
ip netns exec lb ipvsadm -A -u 203.0.113.10:54 -s lc
ip netns exec lb ipvsadm -A -t 203.0.113.10:80 -s rr
ip netns exec lb ipvsadm -a -t 203.0.113.10:80 -r 198.51.100.31:80 -m -w 1
ip netns exec lb ipvsadm -A -f 7 -s rr
for i in 1 2 3 4 5; do ip netns exec cl bash -c "echo hello-$i > /dev/udp/203.0.113.10/53"; ip netns exec cl bash -c "echo hi6-$i > /dev/udp/2001:db8::10/53"; done
ip netns exec cl bash -c "echo x > /dev/tcp/203.0.113.10/80" || true
sleep 1
echo ok
