#!/bin/sh
# ovs-ovn: Open vSwitch (ovsdb-server, ovs-vswitchd) and ovn-controller on a node, in one
# container, as the `ovs-ovn` DaemonSet runs them. The Open_vSwitch database lives in
# /etc/openvswitch (a hostPath) and its socket in /run/openvswitch (shared with kube-ovn-daemon,
# which writes br-int and the chassis settings ovn-controller reads: ovn-remote, encap type/IP).
#
# OVS_DATAPATH_TYPE=netdev runs ovs-vswitchd with the userspace datapath (no kernel module);
# kube-ovn-daemon then needs --ovs-datapath-type=netdev too. The userspace datapath sends tunnel
# packets through the kernel only from an address on an OVS bridge (its tunnel ports look up the
# route and the neighbour there), so with OVS_NETDEV_UPLINK=<nic> (kube-ovn-config's
# ovs-netdev-uplink) the NIC becomes a port of the netdev bridge br-ul, and the NIC's addresses
# and routes move onto br-ul's internal port, with the NIC's MTU. br-ul's internal port is a tap
# that lives only as long as ovs-vswitchd: the moved addresses and routes are kept in br-ul's
# external_ids (uplink-addresses, uplink-routes), and restored from there when the container
# starts again after ovs-vswitchd died (the NIC then has none left).
#
# The script stays in the foreground and exits non-zero when ovsdb-server, ovs-vswitchd or
# ovn-controller dies, after stopping the others, so that the kubelet restarts the container.
set -eu

OVS_RUN=/run/openvswitch
OVN_RUN=/run/ovn
# ovn-controller takes no --unixctl: it makes OVN_RUNDIR/ovn-controller.<pid>.ctl, where
# `ovn-appctl -t ovn-controller` finds it through the PID file.
export OVN_RUNDIR="$OVN_RUN"
UPLINK_BRIDGE=br-ul
UPLINK=${OVS_NETDEV_UPLINK:-}
DATAPATH=${OVS_DATAPATH_TYPE:-system}
mkdir -p "$OVS_RUN" "$OVN_RUN" /etc/openvswitch /var/log/openvswitch /var/log/ovn

log() { echo "start-ovs: $*" >&2; }

case "$DATAPATH" in
  netdev) datapath=--disable-system ;;
  system)
    datapath=""
    if [ -n "$UPLINK" ]; then
      log "OVS_NETDEV_UPLINK ($UPLINK) is for OVS_DATAPATH_TYPE=netdev only"
      exit 1
    fi
    # The host normally has the module; loading it from here needs /lib/modules mounted.
    modprobe openvswitch 2>/dev/null || lsmod 2>/dev/null | grep -q '^openvswitch' ||
      log "the openvswitch kernel module is not loaded; use OVS_DATAPATH_TYPE=netdev without it"
    ;;
  *) log "OVS_DATAPATH_TYPE must be system or netdev, not $DATAPATH"; exit 1 ;;
esac
if [ -n "$UPLINK" ] && ! ip link show dev "$UPLINK" >/dev/null 2>&1; then
  log "OVS_NETDEV_UPLINK: no interface $UPLINK on this node"
  exit 1
fi

DB=/etc/openvswitch/conf.db
SCHEMA=/usr/share/openvswitch/vswitch.ovsschema
if [ -f "$DB" ]; then
  ovsdb-tool convert "$DB" "$SCHEMA" # upgrade a database an older OVS wrote; no-op when current
else
  ovsdb-tool create "$DB" "$SCHEMA"
fi

# Whether process $1 runs: a zombie does not. The daemons detach, so with hostPID their parent is
# the runtime's shim, which may not have reaped a dead one yet (`kill -0` succeeds on a zombie).
running() {
  state=$(sed -n 's/^[0-9]* (.*) \(.\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
# Asks each daemon to exit and waits (up to 10 s, then SIGKILL) until they have: a container started again
# right after must not find the database locked or a socket taken.
stop() {
  pids=$(cat "$OVN_RUN/ovn-controller.pid" "$OVS_RUN/ovs-vswitchd.pid" "$OVS_RUN/ovsdb-server.pid" 2>/dev/null || true)
  ovn-appctl --timeout=5 -t ovn-controller exit 2>/dev/null || true
  ovs-appctl --timeout=5 -t "$OVS_RUN/ovs-vswitchd.ctl" exit 2>/dev/null || true
  ovs-appctl --timeout=5 -t "$OVS_RUN/ovsdb-server.ctl" exit 2>/dev/null || true
  for _ in $(seq 100); do
    left=""
    for pid in $pids; do
      if running "$pid"; then left=$pid; fi
    done
    [ -n "$left" ] || return 0
    sleep 0.1
  done
  log "daemons still running 10 s after they were asked to exit, killed: $pids"
  # shellcheck disable=SC2086 # one PID per word
  kill -KILL $pids 2>/dev/null || true
}
tail_pid=""
# Whatever ends the script ends the log follower; a failure (a daemon that would not start or
# died, an uplink that could not be moved) also stops the daemons, so that none holds the
# database or the sockets when the kubelet starts the container again.
on_exit() {
  rc=$?
  [ -z "$tail_pid" ] || kill "$tail_pid" 2>/dev/null || true
  [ "$rc" = 0 ] || stop
}
trap on_exit EXIT
trap 'stop; exit 0' TERM INT

# Both OVS daemons at nice -10, as OVS's own ovs-ctl starts them (its --ovsdb-server-priority and
# --ovs-vswitchd-priority default): ovn-controller, in this container too, recomputes its flows
# at full speed after a large Northbound change, and must not take the CPU from ovs-vswitchd,
# whose main thread forwards every packet when the datapath is the userspace one (netdev).
nice -n -10 ovsdb-server "$DB" --detach --no-chdir --remote="punix:$OVS_RUN/db.sock" \
  --remote=db:Open_vSwitch,Open_vSwitch,manager_options \
  --unixctl="$OVS_RUN/ovsdb-server.ctl" --pidfile="$OVS_RUN/ovsdb-server.pid" \
  --log-file=/var/log/openvswitch/ovsdb-server.log
# The chassis name, kept on the node (the hostPath) so that OVN sees the same chassis after a
# restart. Written with `init` in one transaction: kube-ovn-daemon waits for the initialized
# database and takes the chassis name from it. The datapath type too: ovn-controller, started
# below, makes br-int of that type if the daemon has not made it yet.
if [ ! -s /etc/openvswitch/system-id.conf ]; then
  cat /proc/sys/kernel/random/uuid >/etc/openvswitch/system-id.conf
fi
ovs-vsctl --no-wait init -- set Open_vSwitch . \
  external_ids:system-id="$(cat /etc/openvswitch/system-id.conf)" \
  external_ids:ovn-bridge-datapath-type="$DATAPATH"

# shellcheck disable=SC2086 # $datapath is one flag or none
nice -n -10 ovs-vswitchd "unix:$OVS_RUN/db.sock" --detach --no-chdir $datapath \
  --unixctl="$OVS_RUN/ovs-vswitchd.ctl" --pidfile="$OVS_RUN/ovs-vswitchd.pid" \
  --log-file=/var/log/openvswitch/ovs-vswitchd.log

# The NIC's global addresses ("172.30.0.11/24 2001:db8::11/64"), and its routes but those the
# kernel makes for an address (one per line, as `ip route` prints them without "dev NIC").
nic_addresses() {
  ip -o addr show dev "$1" scope global | awk '{print $4}' | tr '\n' ' '
}
nic_routes() {
  for family in -4 -6; do
    ip "$family" route show dev "$1" | grep -v -e 'proto kernel' -e '^fe80::' -e '^multicast' || true
  done | sed -e 's/ linkdown//' -e 's/ *$//'
}
saved() {
  ovs-vsctl --if-exists get Bridge "$UPLINK_BRIDGE" "external_ids:$1" 2>/dev/null | sed -e 's/^"//' -e 's/"$//'
}

# Moves the uplink's addresses and routes onto br-ul (or puts back those br-ul had). Idempotent.
setup_uplink() {
  addresses=$(nic_addresses "$UPLINK")
  if [ -n "$addresses" ]; then
    # Routes are stored one per "|", spaces as "+": an external_ids value is one string.
    routes=$(nic_routes "$UPLINK" | tr ' ' '+' | tr '\n' '|')
  else
    addresses=$(saved uplink-addresses | tr ',' ' ')
    routes=$(saved uplink-routes)
  fi
  # From netlink, not /sys/class/net: /sys may show another network namespace than ours.
  mtu=$(ip -o link show dev "$UPLINK" | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
  # Without --no-wait: returns once ovs-vswitchd made the bridge, its tap included. The
  # addresses are recorded in the same transaction, before any is moved.
  # shellcheck disable=SC2086 # $addresses: one word per address, joined with commas
  ovs-vsctl --timeout=60 \
    -- --may-exist add-br "$UPLINK_BRIDGE" \
    -- set Bridge "$UPLINK_BRIDGE" datapath_type=netdev \
       external_ids:uplink="$UPLINK" \
       external_ids:uplink-addresses="\"$(echo $addresses | tr ' ' ',')\"" \
       external_ids:uplink-routes="\"$routes\"" \
    -- --may-exist add-port "$UPLINK_BRIDGE" "$UPLINK" \
    -- set Interface "$UPLINK_BRIDGE" mtu_request="$mtu"
  ip link set "$UPLINK" up
  ip link set "$UPLINK_BRIDGE" mtu "$mtu" up
  for a in $addresses; do
    case "$a" in
      *:*) ip addr replace "$a" dev "$UPLINK_BRIDGE" ;;
      *) ip addr replace "$a" brd + dev "$UPLINK_BRIDGE" ;;
    esac
    ip addr del "$a" dev "$UPLINK" 2>/dev/null || true
  done
  old_ifs=$IFS
  IFS='|'
  for r in $routes; do
    IFS=$old_ifs
    # shellcheck disable=SC2046 # one word per route attribute
    set -- $(echo "$r" | tr '+' ' ')
    [ $# -gt 0 ] || continue
    family=-4
    case "$r" in *:*) family=-6 ;; esac
    ip "$family" route del "$@" dev "$UPLINK" 2>/dev/null || true
    ip "$family" route replace "$@" dev "$UPLINK_BRIDGE"
    IFS='|'
  done
  IFS=$old_ifs
  log "$UPLINK is a port of $UPLINK_BRIDGE (MTU $mtu); on $UPLINK_BRIDGE: ${addresses:-no address}"
}
# Not in a condition: there `set -e` would not stop the script at a failing step.
if [ -n "$UPLINK" ]; then
  setup_uplink
fi

ovn-controller "unix:$OVS_RUN/db.sock" --detach --no-chdir --pidfile="$OVN_RUN/ovn-controller.pid" \
  --log-file=/var/log/ovn/ovn-controller.log

# --pid: the follower also ends when this shell is killed outright (no EXIT trap runs then).
tail --pid=$$ -n +1 -F /var/log/openvswitch/ovsdb-server.log /var/log/openvswitch/ovs-vswitchd.log \
  /var/log/ovn/ovn-controller.log &
tail_pid=$!
# The daemons detach, so they are not this shell's children: their PID files are polled, every
# second (the node's network is down while one is). One that dies takes the container with it.
# A daemon that exits cleanly removes its PID file: that counts as dead too (never `kill -0 0`,
# which would signal this process group and succeed).
alive() {
  pid=$(cat "$1" 2>/dev/null) && [ -n "$pid" ] && running "$pid"
}
while :; do
  for pidfile in "$OVS_RUN/ovsdb-server.pid" "$OVS_RUN/ovs-vswitchd.pid" "$OVN_RUN/ovn-controller.pid"; do
    if ! alive "$pidfile"; then
      log "the daemon of $pidfile exited"
      exit 1
    fi
  done
  sleep 1 &
  wait $! || true
done
