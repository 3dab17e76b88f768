#!/bin/sh
# ovs-ovn: Open vSwitch (ovsdb-server, ovs-vswitchd) and ovn-controller on a node, in one
# container, as the `ovs-ovn` DaemonSet runs them. The Open_vSwitch database lives in
# /etc/openvswitch (a hostPath) and its socket in /run/openvswitch (shared with kube-ovn-daemon,
# which writes br-int and the chassis settings ovn-controller reads: ovn-remote, encap type/IP).
#
# OVS_DATAPATH_TYPE=netdev runs ovs-vswitchd with the userspace datapath (no kernel module);
# kube-ovn-daemon then needs --ovs-datapath-type=netdev too.
set -eu

OVS_RUN=/run/openvswitch
OVN_RUN=/run/ovn
mkdir -p "$OVS_RUN" "$OVN_RUN" /etc/openvswitch /var/log/openvswitch /var/log/ovn

DB=/etc/openvswitch/conf.db
SCHEMA=/usr/share/openvswitch/vswitch.ovsschema
if [ -f "$DB" ]; then
  ovsdb-tool convert "$DB" "$SCHEMA" # upgrade a database an older OVS wrote; no-op when current
else
  ovsdb-tool create "$DB" "$SCHEMA"
fi

ovsdb-server "$DB" --detach --no-chdir --remote="punix:$OVS_RUN/db.sock" \
  --remote=db:Open_vSwitch,Open_vSwitch,manager_options \
  --unixctl="$OVS_RUN/ovsdb-server.ctl" --pidfile="$OVS_RUN/ovsdb-server.pid" \
  --log-file=/var/log/openvswitch/ovsdb-server.log
ovs-vsctl --no-wait init

case "${OVS_DATAPATH_TYPE:-system}" in
  netdev) datapath=--disable-system ;;
  system)
    datapath=""
    # The host normally has the module; loading it from here needs /lib/modules mounted.
    modprobe openvswitch 2>/dev/null || lsmod 2>/dev/null | grep -q '^openvswitch' ||
      echo "start-ovs: the openvswitch kernel module is not loaded; use OVS_DATAPATH_TYPE=netdev without it" >&2
    ;;
  *) echo "start-ovs: OVS_DATAPATH_TYPE must be system or netdev, not ${OVS_DATAPATH_TYPE}" >&2; exit 1 ;;
esac
# shellcheck disable=SC2086 # $datapath is one flag or none
ovs-vswitchd "unix:$OVS_RUN/db.sock" --detach --no-chdir $datapath \
  --unixctl="$OVS_RUN/ovs-vswitchd.ctl" --pidfile="$OVS_RUN/ovs-vswitchd.pid" \
  --log-file=/var/log/openvswitch/ovs-vswitchd.log

ovn-controller "unix:$OVS_RUN/db.sock" --detach --no-chdir \
  --unixctl="$OVN_RUN/ovn-controller.ctl" --pidfile="$OVN_RUN/ovn-controller.pid" \
  --log-file=/var/log/ovn/ovn-controller.log

stop() {
  ovs-appctl -t "$OVN_RUN/ovn-controller.ctl" exit 2>/dev/null || true
  ovs-appctl -t "$OVS_RUN/ovs-vswitchd.ctl" exit 2>/dev/null || true
  ovs-appctl -t "$OVS_RUN/ovsdb-server.ctl" exit 2>/dev/null || true
  exit 0
}
trap stop TERM INT

tail -n +1 -F /var/log/openvswitch/ovsdb-server.log /var/log/openvswitch/ovs-vswitchd.log \
  /var/log/ovn/ovn-controller.log &
while :; do
  for pidfile in "$OVS_RUN/ovsdb-server.pid" "$OVS_RUN/ovs-vswitchd.pid" "$OVN_RUN/ovn-controller.pid"; do
    if ! kill -0 "$(cat "$pidfile" 2>/dev/null || echo 0)" 2>/dev/null; then
      echo "start-ovs: the daemon of $pidfile exited" >&2
      exit 1
    fi
  done
  sleep 5 &
  wait $! || true
done
