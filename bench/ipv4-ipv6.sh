#!/usr/bin/env bash
# IPv4 against IPv6 on one rate-limited link (seed 000, Fig. 2): the two hosts of a
# `lan --nodes 2 --rate-mbit RATE` testbed, pontoon forced onto one family with
# PONTOON_IF_INCLUDE (10.0.0.0/24 or fd00:0:0:1::/64). Runs alternate between the
# families, RUNS times; prints medians, min-max and the IPv6 / IPv4 ratios.
# Both ranks pinned (CPU 0 on h1, CPU 1 on h2). Needs root.
#
#   bench/ipv4-ipv6.sh            (RUNS=5 RATE=1000 ITERS=20000 by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
RUNS=${RUNS:-5}
RATE=${RATE:-1000}
ITERS=${ITERS:-20000}
pontoon=target/release/pontoon
ex=target/release/examples
need "$pontoon" "$ex/pingpong" "$ex/bw"
need_root

bed="famb-$$"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; "$pontoon" testbed down "$bed" >/dev/null' EXIT
"$pontoon" testbed up lan --nodes 2 --rate-mbit "$RATE" --name "$bed" >/dev/null
declare -A cidr=([v4]=10.0.0.0/24 [v6]=fd00:0:0:1::/64)

for i in $(seq "$RUNS"); do
    for fam in v4 v6; do
        export PONTOON_IF_INCLUDE=${cidr[$fam]}
        "$pontoon" run --testbed "$bed" -n 2 --bind-to core "$ex/pingpong" --iters "$ITERS" --max 8 |
            awk '$1 == 8 { print $2 }' >>"$tmp/lat_$fam"
        "$pontoon" run --testbed "$bed" -n 2 --bind-to core "$ex/bw" --size 4194304 --window 16 --iters 10 |
            awk '{ print $2 * 8 }' >>"$tmp/bw_$fam"
    done
    echo "run $i/$RUNS done" >&2
done
unset PONTOON_IF_INCLUDE
PONTOON_IF_INCLUDE=${cidr[v6]} "$pontoon" run --testbed "$bed" -n 2 "$pontoon" doctor | grep -A3 '^paths' >&2

echo "| figure (lan testbed, ${RATE} Mbit/s tbf, $RUNS runs, pinned) | IPv4 median (min-max) | IPv6 median (min-max) | IPv6 / IPv4 |"
echo "|---|---|---|---|"
compare_row "8 B one-way latency, us" "$tmp/lat_v4" "$tmp/lat_v6" 3
compare_row "4 MiB streaming bandwidth, Mbit/s" "$tmp/bw_v4" "$tmp/bw_v6" 3
