#!/bin/sh
# The reference for CNI ADD and DEL in cni_bench: the work Kube-OVN's daemon does for a pod,
# done with the standard tools, one fork per step as a shell script does it.
#
#   ovs_vsctl_pod.sh add NODE_NS DB HOST_NIC POD_NS IFNAME MAC IP/PLEN GW MTU IFACE_ID POD NAMESPACE
#   ovs_vsctl_pod.sh del NODE_NS DB HOST_NIC
#
# ADD: the veth in the node's namespace (where ovs-vswitchd runs), the host end up and plugged
# into br-int with the pod's external_ids (`iface-id=<pod>.<ns>`, as Kube-OVN's daemon sets
# them), the peer moved into the pod and configured (name, MAC, MTU, address, lo, default route,
# TX checksum off for the userspace datapath), then `ovs-vsctl wait-until` ovn-controller marks
# the port `ovn-installed`. DEL: the port, then the veth.
set -eu

op=$1
node=$2
db=$3
host=$4
vsctl() { ovs-vsctl --db="unix:$db" --timeout=60 "$@"; }

case "$op" in
add)
	pod=$5 ifname=$6 mac=$7 ip=$8 gw=$9
	shift 9
	mtu=$1 iface_id=$2 pod_name=$3 pod_namespace=$4
	peer="${host%_h}_c"
	ip -n "$node" link add "$host" mtu "$mtu" type veth peer name "$peer" mtu "$mtu"
	ip -n "$node" link set "$host" up
	vsctl add-port br-int "$host" -- set interface "$host" \
		"external_ids:iface-id=$iface_id" external_ids:vendor=kube-ovn \
		"external_ids:pod_name=$pod_name" "external_ids:pod_namespace=$pod_namespace" \
		"external_ids:ip=${ip%/*}" "external_ids:attached-mac=$mac" \
		"external_ids:pod_netns=/run/netns/$pod"
	ip -n "$node" link set "$peer" netns "$pod"
	ip -n "$pod" link set "$peer" name "$ifname" address "$mac"
	ip -n "$pod" addr add "$ip" dev "$ifname"
	ip -n "$pod" link set "$ifname" up
	ip -n "$pod" link set lo up
	ip -n "$pod" route add default via "$gw"
	ip netns exec "$pod" ethtool -K "$ifname" tx off >/dev/null
	vsctl wait-until interface "$host" external_ids:ovn-installed=true
	;;
del)
	vsctl --if-exists del-port br-int "$host"
	ip -n "$node" link del "$host" 2>/dev/null || true
	;;
*)
	echo "usage: $0 add|del ..." >&2
	exit 2
	;;
esac
