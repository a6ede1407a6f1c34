#!/usr/bin/env bash
# Accuracy and throughput of the testbed's WAN emulator, measured through `pontoon testbed`
# itself: for each setting, a fresh `wan` testbed, measured between the two ends of the
# emulated link (a-gw 203.0.113.1 <-> b-gw 203.0.113.2), so no router hop is counted.
#   RTT:        ping -c 200 -i 0.01 after 5 warm-up pings; median vs 2 x one-way delay
#   loss:       ping -f -c 10000 (round trip: 1 - (1-p)^2 expected) and the emulator's counters
#   throughput: iperf3 -t 10, one TCP stream (autotuned windows; hosts allow 64 MiB)
# Needs root, ping (iputils-ping) and iperf3: scripts/install-deps.sh --anchors.
#
#   bench/wan-emulator.sh         (prints markdown tables)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pontoon=target/release/pontoon
[[ -x $pontoon ]] || { echo "missing $pontoon: cargo build --release --bins" >&2; exit 1; }
[[ "$(id -u)" -eq 0 ]] || { echo "needs root (network namespaces)" >&2; exit 1; }
for t in ping iperf3; do command -v $t >/dev/null || { echo "$t is missing: scripts/install-deps.sh --anchors" >&2; exit 1; }; done

bed="wanbench-$$"
trap '"$pontoon" testbed down "$bed" >/dev/null 2>&1 || true' EXIT
up() { "$pontoon" testbed down "$bed" >/dev/null 2>&1 || true; "$pontoon" testbed up wan --name "$bed" "$@" >/dev/null; }
on() { local host=$1; shift; "$pontoon" testbed exec -t "$bed" "$host" -- "$@"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "| configured RTT (2 x one-way delay) | measured median RTT | min / max | error |"
echo "|---|---|---|---|"
for delay in 0.5 5 25 50; do
    up --delay-ms "$delay"
    on a-gw ping -c 5 -i 0.05 -q 203.0.113.2 >/dev/null
    samples=$(on a-gw ping -c 200 -i 0.01 203.0.113.2 | sed -n 's/.*time=\([0-9.]*\) ms/\1/p')
    med=$(echo "$samples" | median)
    min=$(echo "$samples" | sort -g | head -1) max=$(echo "$samples" | sort -g | tail -1)
    awk -v d="$delay" -v m="$med" -v lo="$min" -v hi="$max" \
        'BEGIN { printf "| %g ms | %.3f ms | %.3f / %.3f | %+.1f %% |\n", 2 * d, m, lo, hi, (m / (2 * d) - 1) * 100 }'
done

echo
echo "| configured loss (each way) | ping -f round-trip loss | expected round trip | error |"
echo "|---|---|---|---|"
for loss in 1 5; do
    up --loss-pct "$loss"
    lost=$(on a-gw ping -f -c 10000 -q 203.0.113.2 | sed -n 's/.* \([0-9.]*\)% packet loss.*/\1/p')
    awk -v p="$loss" -v l="$lost" 'BEGIN { e = (1 - (1 - p / 100) ^ 2) * 100; printf "| %g %% | %.2f %% | %.2f %% | %+.1f %% |\n", p, l, e, (l / e - 1) * 100 }'
done

echo
echo "| WAN link | iperf3 receiver throughput (1 stream, 10 s) |"
echo "|---|---|"
iperf() {
    on b-gw iperf3 -s -1 -D -p 5201
    sleep 0.3
    on a-gw iperf3 -c 203.0.113.2 -p 5201 -t 10 -f m | awk '/receiver/ { print $(NF-2), $(NF-1) }'
}
up --wan-rate-mbit 1000
echo "| 1 Gbit/s, no delay | $(iperf) |"
up --wan-rate-mbit 1000 --delay-ms 25
echo "| 1 Gbit/s, 25 ms each way (RTT 50 ms) | $(iperf) |"
up --wan-rate-mbit 1000 --delay-ms 50
echo "| 1 Gbit/s, 50 ms each way (RTT 100 ms) | $(iperf) |"
up
echo "| no rate limit, no delay (the emulator's ceiling) | $(iperf) |"
