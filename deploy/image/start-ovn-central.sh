#!/bin/sh
# ovn-central: the OVN northbound and southbound databases (ovsdb-server) and ovn-northd, in one
# container, as the `ovn-central` Deployment runs them. One member by default; a RAFT cluster of
# three (or five) when OVN_CENTRAL_IPS lists every member's address, this one's (POD_IP, the node's
# address with hostNetwork) among them. The first address listed creates the clusters, the others
# join it. Databases live in OVN_DB_DIR (a hostPath), so a restarted pod keeps them.
#
# Ports: NB 6641, SB 6642 (clients), 6643/6644 (RAFT), as Kube-OVN uses them.
set -eu

SELF=${POD_IP:?POD_IP is required (the downward API status.podIP)}
MEMBERS=${OVN_CENTRAL_IPS:-$SELF}
DB_DIR=${OVN_DB_DIR:-/etc/ovn}
RUN_DIR=/var/run/ovn
LOG_DIR=/var/log/ovn
mkdir -p "$DB_DIR" "$RUN_DIR" "$LOG_DIR"

# An IPv6 address in an OVSDB remote is written in brackets.
bracket() { case $1 in *:*) echo "[$1]" ;; *) echo "$1" ;; esac; }
members() { echo "$MEMBERS" | tr ',' ' '; }
remotes() {
  out=""
  for ip in $(members); do out="${out:+$out,}tcp:$(bracket "$ip"):$1"; done
  echo "$out"
}
count=$(members | wc -w)
case " $(members) " in
  *" $SELF "*) ;;
  *) echo "start-ovn-central: POD_IP $SELF is not in OVN_CENTRAL_IPS ($MEMBERS)" >&2; exit 1 ;;
esac

# create_db FILE SCHEMA DATABASE RAFT_PORT
create_db() {
  [ -f "$1" ] && return 0
  if [ "$count" = 1 ]; then
    ovsdb-tool create "$1" "$2"
  elif [ "$(members | cut -d' ' -f1)" = "$SELF" ]; then
    ovsdb-tool create-cluster "$1" "$2" "tcp:$(bracket "$SELF"):$4"
  else
    peers=""
    for ip in $(members); do
      [ "$ip" = "$SELF" ] || peers="$peers tcp:$(bracket "$ip"):$4"
    done
    # shellcheck disable=SC2086 # one argument per peer
    ovsdb-tool join-cluster "$1" "$3" "tcp:$(bracket "$SELF"):$4" $peers
  fi
}

# start_db NAME FILE CLIENT_PORT
start_db() {
  ovsdb-server "$2" --detach --no-chdir \
    --remote="punix:$RUN_DIR/$1.sock" --remote="ptcp:$3:$(bracket "$SELF")" \
    --unixctl="$RUN_DIR/$1.ctl" --pidfile="$RUN_DIR/$1.pid" --log-file="$LOG_DIR/$1.log"
}

create_db "$DB_DIR/ovnnb_db.db" /usr/share/ovn/ovn-nb.ovsschema OVN_Northbound 6643
create_db "$DB_DIR/ovnsb_db.db" /usr/share/ovn/ovn-sb.ovsschema OVN_Southbound 6644
# A database file written by an older OVN is upgraded in place (a no-op when current).
if [ "$count" = 1 ]; then
  ovsdb-tool convert "$DB_DIR/ovnnb_db.db" /usr/share/ovn/ovn-nb.ovsschema
  ovsdb-tool convert "$DB_DIR/ovnsb_db.db" /usr/share/ovn/ovn-sb.ovsschema
fi
start_db ovnnb_db "$DB_DIR/ovnnb_db.db" 6641
start_db ovnsb_db "$DB_DIR/ovnsb_db.db" 6642

# Every member runs ovn-northd; they share a lock in the southbound database, one is active.
ovn-northd --detach --no-chdir --ovnnb-db="$(remotes 6641)" --ovnsb-db="$(remotes 6642)" \
  --unixctl="$RUN_DIR/ovn-northd.ctl" --pidfile="$RUN_DIR/ovn-northd.pid" --log-file="$LOG_DIR/ovn-northd.log"

stop() {
  ovs-appctl -t "$RUN_DIR/ovn-northd.ctl" exit 2>/dev/null || true
  ovs-appctl -t "$RUN_DIR/ovnnb_db.ctl" exit 2>/dev/null || true
  ovs-appctl -t "$RUN_DIR/ovnsb_db.ctl" exit 2>/dev/null || true
  exit 0
}
trap stop TERM INT

echo "start-ovn-central: NB $(remotes 6641), SB $(remotes 6642), this member $SELF"
# The logs go to the container's output; the loop ends (and the pod restarts) when a daemon dies.
# --pid: the follower ends with this shell, also when it is killed outright.
tail --pid=$$ -n +1 -F "$LOG_DIR/ovnnb_db.log" "$LOG_DIR/ovnsb_db.log" "$LOG_DIR/ovn-northd.log" &
# Whether process $1 runs: a zombie does not. The daemons detach, so with hostPID their parent is
# the runtime's shim, which may not have reaped a dead one yet (`kill -0` succeeds on a zombie).
running() {
  state=$(sed -n 's/^[0-9]* (.*) \(.\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
# A daemon that exits cleanly removes its PID file: that counts as dead too (never `kill -0 0`,
# which would signal this process group and succeed).
alive() {
  pid=$(cat "$1" 2>/dev/null) && [ -n "$pid" ] && running "$pid"
}
while :; do
  for p in ovnnb_db ovnsb_db ovn-northd; do
    if ! alive "$RUN_DIR/$p.pid"; then
      echo "start-ovn-central: $p exited" >&2
      exit 1
    fi
  done
  sleep 5 &
  wait $! || true
done
