#!/usr/bin/env bash
# A three-host fleet on one machine: Linux network namespaces joined by veth pairs to a bridge
# (in its own namespace), a fleetd in each, linked to the other two with pinned host keys.
#
#   deploy/netns-trial.sh up     [WORKDIR]   build it and start the daemons (needs root)
#   deploy/netns-trial.sh down   [WORKDIR]   stop the daemons and remove every namespace
#   deploy/netns-trial.sh cut    HOST        partition HOST (its link to the bridge goes down)
#   deploy/netns-trial.sh heal   HOST        reconnect it
#   deploy/netns-trial.sh status [WORKDIR]   `fleetd peers` on every host
#
# Hosts are a, b, c at 10.77.0.1-3 (namespaces fdt-a, fdt-b, fdt-c; the bridge in fdt-sw). The
# state dirs, keys, configs and logs are under WORKDIR (default /tmp/fleetd-netns-trial). Only
# these namespaces are touched. FLEETD (default: `fleetd` on PATH, else target/release/fleetd)
# picks the binary.
set -euo pipefail

PREFIX=${FLEETD_NETNS_PREFIX:-fdt}
WORK=${2:-/tmp/fleetd-netns-trial}
HOSTS=(a b c)
if [[ -z "${FLEETD:-}" ]]; then
  if command -v fleetd >/dev/null; then FLEETD=$(command -v fleetd); else FLEETD="$(cd "$(dirname "$0")/.." && pwd)/target/release/fleetd"; fi
fi

ip_of() { case $1 in a) echo 10.77.0.1;; b) echo 10.77.0.2;; c) echo 10.77.0.3;; *) echo "unknown host $1" >&2; exit 2;; esac; }

need_root() { [[ $(id -u) == 0 ]] || { echo "netns-trial: needs root (network namespaces)" >&2; exit 2; }; }

up() {
  need_root
  [[ -x "$FLEETD" ]] || { echo "netns-trial: no fleetd binary at $FLEETD (cargo build --release, or set FLEETD)" >&2; exit 2; }
  mkdir -p "$WORK"
  ip netns add "$PREFIX-sw"
  ip -n "$PREFIX-sw" link add br0 type bridge
  ip -n "$PREFIX-sw" link set dev br0 up
  for h in "${HOSTS[@]}"; do
    ip netns add "$PREFIX-$h"
    ip link add "$PREFIX-$h-0" netns "$PREFIX-$h" type veth peer name "$h" netns "$PREFIX-sw"
    ip -n "$PREFIX-sw" link set dev "$h" master br0 up
    ip -n "$PREFIX-$h" addr add "$(ip_of "$h")/24" dev "$PREFIX-$h-0"
    ip -n "$PREFIX-$h" link set dev "$PREFIX-$h-0" up
    ip -n "$PREFIX-$h" link set dev lo up
    mkdir -p "$WORK/$h"
    # A second `up` keeps each host's identity (fleetd never overwrites a host key).
    if [[ ! -f "$WORK/$h/host.key" || ! -s "$WORK/$h/host.key.txt" ]]; then
      rm -f "$WORK/$h/host.key" "$WORK/$h/host.key.txt"
      "$FLEETD" keygen --out "$WORK/$h/host.key" > "$WORK/$h/host.key.txt"
    fi
  done
  for h in "${HOSTS[@]}"; do
    {
      echo "[daemon]"
      echo "host = \"$h\""
      echo "key_file = \"$WORK/$h/host.key\""
      echo "[link]"
      echo "listen = \"$(ip_of "$h"):7801\""
      echo "keep_alive_secs = 1"
      echo "idle_timeout_secs = 5"
      for p in "${HOSTS[@]}"; do
        [[ $p == "$h" ]] && continue
        echo "[peers.$p]"
        echo "addr = \"$(ip_of "$p"):7801\""
        echo "public_key = \"$(cat "$WORK/$p/host.key.txt")\""
      done
    } > "$WORK/$h/fleetd.toml"
    "$FLEETD" config check "$WORK/$h/fleetd.toml" >/dev/null
    ip netns exec "$PREFIX-$h" "$FLEETD" serve --config "$WORK/$h/fleetd.toml" --state-dir "$WORK/$h/state" \
      > "$WORK/$h/fleetd.log" 2>&1 &
    echo $! > "$WORK/$h/pid"
  done
  echo "netns-trial: hosts a b c up under $WORK; try: $0 status $WORK"
}

down() {
  for h in "${HOSTS[@]}"; do
    if [[ -f "$WORK/$h/pid" ]]; then
      kill "$(cat "$WORK/$h/pid")" 2>/dev/null || true
      rm -f "$WORK/$h/pid"
    fi
  done
  for h in "${HOSTS[@]}"; do
    for _ in $(seq 50); do pgrep -f "$WORK/$h/state" >/dev/null || break; sleep 0.1; done
    pkill -9 -f "$WORK/$h/state" 2>/dev/null || true
  done
  for ns in "${HOSTS[@]/#/$PREFIX-}" "$PREFIX-sw"; do
    ip netns del "$ns" 2>/dev/null || true
  done
  echo "netns-trial: down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  cut) need_root; ip -n "$PREFIX-sw" link set dev "${2:?host}" down ;;
  heal) need_root; ip -n "$PREFIX-sw" link set dev "${2:?host}" up ;;
  status)
    for h in "${HOSTS[@]}"; do echo "== $h"; "$FLEETD" peers --state-dir "$WORK/$h/state" || true; done ;;
  *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
