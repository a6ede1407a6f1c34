#!/usr/bin/env bash
# Striping over two NICs: the two hosts of a `multinic --nodes 2 --rate-mbit RATE` testbed
# (every NIC limited to RATE by tbf), pontoon's `bw` with 16 MiB messages over both NICs
# (two lanes) against `PONTOON_IF_INCLUDE=eth0` (one lane) and against iperf3 with one stream
# per NIC at once (the anchor), free and pinned like the ranks (both senders on core 0, both
# receivers on core 1: on this testbed the emulated network's softirq work runs on the
# sending CPU, so placement decides). Runs alternate, RUNS times;
# prints medians, min-max and the ratio. Both ranks pinned. Needs root.
#
#   bench/multinic.sh            (RUNS=5 RATE=1000 by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
RUNS=${RUNS:-5}
RATE=${RATE:-1000}
pontoon=target/release/pontoon
ex=target/release/examples
need "$pontoon" "$ex/bw"
need_root

bed="mnic-$$"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; "$pontoon" testbed down "$bed" >/dev/null' EXIT
"$pontoon" testbed up multinic --nodes 2 --rate-mbit "$RATE" --name "$bed" >/dev/null
bw() { "$pontoon" run --testbed "$bed" -n 2 --bind-to core "$@" "$ex/bw" --size 16777216 --window 32 --iters 3 | awk '{ print $2 * 8 }'; }
# The anchor: iperf3, one TCP stream per NIC at once.
# iperf_pair [server-cpus client-cpus]
iperf_pair() {
    local scpu=${1:-0-1} ccpu=${2:-0-1}
    for port in 5301 5302; do "$pontoon" testbed exec -t "$bed" h2 -- taskset -c "$scpu" iperf3 -s -1 -D -p "$port"; done
    sleep 0.3
    { "$pontoon" testbed exec -t "$bed" h1 -- taskset -c "$ccpu" iperf3 -c 10.0.0.2 -p 5301 -t 5 -f m &
      "$pontoon" testbed exec -t "$bed" h1 -- taskset -c "$ccpu" iperf3 -c 10.0.1.2 -p 5302 -t 5 -f m; wait; } |
        awk '/receiver/ { sum += $(NF-2) } END { print sum }'
}
for i in $(seq "$RUNS"); do
    bw >>"$tmp/two"
    bw -x PONTOON_IF_INCLUDE=eth0 >>"$tmp/one"
    iperf_pair >>"$tmp/iperf"
    iperf_pair 1 0 >>"$tmp/iperf-pinned"
    echo "run $i/$RUNS done" >&2
done
"$pontoon" run --testbed "$bed" -n 2 "$pontoon" doctor | grep -A3 '^paths' >&2
read -r t tmin tmax <<<"$(stats "$tmp/two")"
read -r o omin omax <<<"$(stats "$tmp/one")"
read -r p pmin pmax <<<"$(stats "$tmp/iperf")"
read -r q qmin qmax <<<"$(stats "$tmp/iperf-pinned")"
echo "| 16 MiB streaming, Mbit/s (multinic testbed, ${RATE} Mbit/s per NIC, $RUNS runs, pinned) | median (min-max) |"
echo "|---|---|"
echo "| two NICs, two lanes | $t ($tmin-$tmax) |"
echo "| PONTOON_IF_INCLUDE=eth0, one lane | $o ($omin-$omax) |"
echo "| anchor: iperf3, one stream per NIC at once | $p ($pmin-$pmax) |"
echo "| anchor: the same, pinned like the ranks | $q ($qmin-$qmax) |"
awk -v t="$t" -v o="$o" -v p="$p" -v q="$q" 'BEGIN { printf "| two lanes / one lane | %.2fx |\n| two lanes / iperf3 pair | %.2fx |\n| two lanes / iperf3 pair pinned | %.2fx |\n", t / o, t / p, t / q }'
