#!/usr/bin/env bash
# pontoon against its anchors, in one run: the bare busy-polling socket (bench/sock/sockpp)
# for 8 B latency and 4 MiB ping-pong bandwidth, and iperf3 (one TCP stream) for streaming
# bandwidth against pontoon's `bw` example. Runs alternate between anchor and pontoon, RUNS
# times; prints medians, min-max and ratios.
# WHERE=loopback (default): both ends on this host. WHERE=testbed (root): the two hosts of a
# `lan --nodes 2` testbed (two network namespaces joined by a bridge), built and removed here.
# Placement: the two ends are pinned to CPUs 0 and 1 (sockpp --cpu; pontoon run --bind-to
# core; iperf3 -A); PIN=0 leaves every process unpinned.
#
#   bench/compare.sh            (RUNS=5 ITERS=20000 WHERE=loopback by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

RUNS=${RUNS:-5}
ITERS=${ITERS:-20000}
PORT=${IPERF_PORT:-5299}
PIN=${PIN:-1}
WHERE=${WHERE:-loopback}
if [[ $PIN == 1 ]]; then
    cli_pin=(--cpu 0) srv_pin=(--cpu 1) pontoon_pin=(--bind-to core) iperf_srv_pin=(-A 1) iperf_cli_pin=(-A 0) placement="pinned to CPUs 0,1"
else
    cli_pin=() srv_pin=() pontoon_pin=() iperf_srv_pin=() iperf_cli_pin=() placement=unpinned
fi
pontoon=target/release/pontoon
ex=target/release/examples
sockpp=bench/build/sockpp
for f in "$pontoon" "$ex/pingpong" "$ex/bw" "$sockpp"; do
    [[ -x $f ]] || { echo "missing $f: run 'cargo build --release --workspace --examples' and 'make -C bench'" >&2; exit 1; }
done
command -v iperf3 >/dev/null || { echo "iperf3 is missing: scripts/install-deps.sh --anchors" >&2; exit 1; }

tmp=$(mktemp -d)
case $WHERE in
    loopback)
        trap 'rm -rf "$tmp"' EXIT
        on_client=() on_server=() server_addr=127.0.0.1 job=(-n 2)
        ;;
    testbed)
        [[ "$(id -u)" -eq 0 ]] || { echo "WHERE=testbed needs root (network namespaces)" >&2; exit 1; }
        bed="bench-$$"
        trap 'rm -rf "$tmp"; "$pontoon" testbed down "$bed" >/dev/null' EXIT
        "$pontoon" testbed up lan --nodes 2 --name "$bed" >/dev/null
        on_client=("$pontoon" testbed exec -t "$bed" h1 --) on_server=("$pontoon" testbed exec -t "$bed" h2 --)
        server_addr=10.0.0.2 job=(--testbed "$bed" -n 2)
        placement="$placement; two namespaces (testbed lan, veth + bridge)"
        ;;
    *) echo "WHERE is loopback or testbed, not '$WHERE'" >&2; exit 1 ;;
esac

# column $2 (latency) or $3 (bandwidth) of the row for size $1 in a pingpong-style table
row() { awk -v s="$1" -v c="$2" '$1 == s { print $c }'; }

# 8 B latency first, in runs of their own (--max 8): seconds of bandwidth floods between
# the runs of one pair leave the machine in another state for the next short run.
for i in $(seq "$RUNS"); do
    "${on_server[@]}" "$sockpp" server --port "$PORT" "${srv_pin[@]}" >/dev/null 2>&1 &
    sleep 0.3
    "${on_client[@]}" "$sockpp" client "$server_addr" "$PORT" "${cli_pin[@]}" --iters "$ITERS" --max 8 >"$tmp/sock" 2>/dev/null
    wait
    row 8 2 <"$tmp/sock" >>"$tmp/sock_lat"
    "$pontoon" run "${job[@]}" "${pontoon_pin[@]}" "$ex/pingpong" --iters "$ITERS" --max 8 >"$tmp/pp"
    row 8 2 <"$tmp/pp" >>"$tmp/pp_lat"
    echo "latency run $i/$RUNS done" >&2
done
for i in $(seq "$RUNS"); do
    "${on_server[@]}" "$sockpp" server --port "$PORT" "${srv_pin[@]}" >/dev/null 2>&1 &
    sleep 0.3
    "${on_client[@]}" "$sockpp" client "$server_addr" "$PORT" "${cli_pin[@]}" --iters "$ITERS" --max 4194304 >"$tmp/sock" 2>/dev/null
    wait
    row 4194304 3 <"$tmp/sock" >>"$tmp/sock_bw"
    "$pontoon" run "${job[@]}" "${pontoon_pin[@]}" "$ex/pingpong" --iters "$ITERS" --max 4194304 >"$tmp/pp"
    row 4194304 3 <"$tmp/pp" >>"$tmp/pp_bw"
    "${on_server[@]}" iperf3 -s -1 "${iperf_srv_pin[@]}" -p "$PORT" >/dev/null 2>&1 &
    sleep 0.3
    "${on_client[@]}" iperf3 -c "$server_addr" "${iperf_cli_pin[@]}" -p "$PORT" -t 3 -f m | awk '/sender/ { print $(NF-3) }' >>"$tmp/iperf"
    wait
    "$pontoon" run "${job[@]}" "${pontoon_pin[@]}" "$ex/bw" --size 4194304 --window 16 --iters 30 | awk '{ print $2 * 8 }' >>"$tmp/bw"
    echo "run $i/$RUNS done" >&2
done

echo "| figure ($WHERE, $RUNS runs, $placement) | anchor median (min-max) | pontoon median (min-max) | pontoon / anchor |"
echo "|---|---|---|---|"
compare_row "8 B one-way latency, us (anchor: sockpp)" "$tmp/sock_lat" "$tmp/pp_lat"
compare_row "4 MiB ping-pong bandwidth, MB/s (anchor: sockpp)" "$tmp/sock_bw" "$tmp/pp_bw"
compare_row "4 MiB streaming bandwidth, Mbit/s (anchor: iperf3, 1 stream; pontoon: bw)" "$tmp/iperf" "$tmp/bw"
