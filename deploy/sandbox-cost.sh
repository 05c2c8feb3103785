#!/usr/bin/env bash
# What the member sandbox costs: spawn time and memory per member, with and without it, in the
# same run (docs/SECURITY.md, "What the sandbox costs").
#
#   deploy/sandbox-cost.sh [N] [ROUNDS]
#
# For each round, and each of [sandbox] mode = "off" and "bwrap" in turn (the order alternates
# per round, so drift on a shared machine falls on both), starts a daemon on a fresh state dir,
# spawns N members running `sleep` one after another with `fleetd spawn` (wall time of each
# spawn, which returns once the terminal runs), then sums the proportional set size (PSS,
# /proc/PID/smaps_rollup) of each member's processes: the PTY host and everything under it
# (bubblewrap's two processes and the program when confined; the program alone when not).
# Prints the median spawn time and the mean PSS per member for each mode, and their ratio.
# FLEETD (default target/release/fleetd) picks the binary.
set -euo pipefail

N=${1:-20}
ROUNDS=${2:-3}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FLEETD=${FLEETD:-$ROOT/target/release/fleetd}
[[ -x "$FLEETD" ]] || { echo "sandbox-cost: no fleetd at $FLEETD (cargo build --release, or set FLEETD)" >&2; exit 2; }
command -v bwrap >/dev/null || { echo "sandbox-cost: bwrap is not installed" >&2; exit 2; }

now_us() { echo $(( $(date +%s%N) / 1000 )); }

# PSS in kB of pid and all its descendants.
tree_pss() {
  local pid=$1 total=0 p kids
  local todo=("$pid")
  while ((${#todo[@]})); do
    p=${todo[0]}; todo=("${todo[@]:1}")
    if [[ -r /proc/$p/smaps_rollup ]]; then
      total=$(( total + $(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup") ))
    fi
    kids=$(cat /proc/"$p"/task/*/children 2>/dev/null || true)
    for k in $kids; do todo+=("$k"); done
  done
  echo "$total"
}

one() { # mode -> "median_spawn_ms mean_pss_kb"
  local mode=$1 dir
  dir=$(mktemp -d /tmp/fleetd-sbx-XXXXXX)
  printf '[daemon]\non_shutdown = "stop"\n[sandbox]\nmode = "%s"\n[lifecycle]\nidle_ttl_seconds = 0\nmax_members = 1000\n' "$mode" > "$dir/fleetd.toml"
  FLEETD_STATE_DIR=$dir/s "$FLEETD" serve --config "$dir/fleetd.toml" >"$dir/log" 2>&1 &
  local daemon=$!
  for _ in $(seq 100); do [[ -S $dir/s/api.sock ]] && break; sleep 0.05; done
  local times=() starts=() t0 t1 i
  for i in $(seq "$N"); do
    t0=$(now_us)
    FLEETD_STATE_DIR=$dir/s "$FLEETD" spawn --role worker --name "m$i" -- \
      sh -c "date +%s%N > $dir/started.$i; exec sleep 100000" >/dev/null
    t1=$(now_us)
    times+=($(( t1 - t0 )))
    # The program's own first act stamps when it ran: no polling in the measured path.
    for _ in $(seq 200); do [[ -s $dir/started.$i ]] && break; sleep 0.01; done
    starts+=($(( $(cat "$dir/started.$i") / 1000 - t0 )))
  done
  local pss=0 hp
  for hp in $(FLEETD_STATE_DIR=$dir/s "$FLEETD" list --json | python3 -c 'import json,sys; v=json.load(sys.stdin); [print(m["host_pid"]) for m in v["members"] if m.get("host_pid")]'); do
    pss=$(( pss + $(tree_pss "$hp") ))
  done
  local median mstart
  median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  mstart=$(printf '%s\n' "${starts[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  FLEETD_STATE_DIR=$dir/s "$FLEETD" list --json | grep -q '"sandbox": "bwrap"' && confined=yes || confined=no
  kill "$daemon"; wait "$daemon" 2>/dev/null || true
  pkill -f "fleetd-sbx-.*/s/term" 2>/dev/null || true
  rm -rf "$dir"
  echo "$median $mstart $(( pss / N )) $confined"
}

ms() { python3 -c "print(f'{$1/1000:.1f}')"; }
declare -A spawn start pss
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then order=(off bwrap); else order=(bwrap off); fi
  for m in "${order[@]}"; do
    read -r s st p c < <(one "$m")
    [[ $m == bwrap && $c != yes ]] && { echo "sandbox-cost: members were not confined in mode bwrap" >&2; exit 1; }
    spawn[$m]+="$s "; start[$m]+="$st "; pss[$m]+="$p "
    echo "round $r mode $m: median spawn answered $(ms "$s") ms, program running $(ms "$st") ms, PSS per member $p kB (confined: $c)"
  done
done
med() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
row() { # name off bwrap unit
  python3 -c "o,b=$2,$3; print(f'  {\"$1\":<28} off {o/$5:8.1f} $4  bwrap {b/$5:8.1f} $4  ratio {b/o:.2f}  (+{(b-o)/$5:.1f} $4)')"
}
echo "median of rounds, $N members each:"
row "spawn answered" "$(med "${spawn[off]}")" "$(med "${spawn[bwrap]}")" ms 1000
row "program running after" "$(med "${start[off]}")" "$(med "${start[bwrap]}")" ms 1000
row "PSS per member" "$(med "${pss[off]}")" "$(med "${pss[bwrap]}")" kB 1
