#!/usr/bin/env bash
# Seed 001's experiment on the testbed: two clusters of NODES compute nodes behind NAT'd
# heads, every NIC limited to RATE Mbit/s (the paper: 4 nodes, 100 Mbit/s Fast Ethernet).
# Between the clusters' compute nodes, for each path kind:
#   routed      two-clusters with IPv6: the nodes' global addresses, routed by the heads
#   nat-proxy   two-clusters without IPv6: out through the own NAT, in through the relay on
#               the target's head (seed 001's scheme)
#   two-proxy   the same testbed, through the own head's relay, then the target's
#               (PACX-MPI's scheme, seed 001's baseline)
#   punched     the same testbed: nat-proxy first, then a TCP simultaneous open through both
#               NATs, which takes the traffic (needs DELAY_MS > 0: on a zero-delay link
#               the SYNs cannot be timed to cross; a run whose punching failed says so on
#               stderr and is left out)
# (PONTOON_PATHS=direct,KIND: pairs inside a cluster connect directly in every case.)
# DELAY_MS puts that one-way delay on the link between the heads of both testbeds.
# it measures 128 B ping-pong latency (bench/c/pingpong.c, ranks on a-c1 and b-c1) and the
# aggregate bandwidth of 1:1, 2:1, 4:1 and 4:4 streams (bench/c/streams.c, senders in
# cluster a, receivers in cluster b) for 1, 4, 16, 64, 256 KiB and 1 MiB messages (the
# paper: 1 KB to 1 MB), alternating the path kinds run by
# run. The relays are standalone daemons on the heads (`pontoon relay`, as on a real front
# end); their CPU time per GB moved is read from /proc. Prints CSV rows:
#   rate_mbit,path,pattern,bytes,run,value     (value: one-way µs for pattern "latency",
#                                              else aggregate MB/s)
# and relay CPU rows: rate_mbit,path,relay-cpu,bytes_moved,0,cpu_s_per_gb
# Testbed hosts share this machine's CPUs: ranks yield while they poll (PONTOON_YIELD=always)
# so that up to 8 of them and the relays share 2 CPUs, whatever the path kind.
#
#   RATES="100 1000" RUNS=3 NODES=4 bench/relays.sh > bench/results/relays.csv
#   DELAY_MS=0.5 PATHS="routed nat-proxy punched" bench/relays.sh > bench/results/punched.csv
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh
need_root
pontoon=$PWD/target/release/pontoon
pp=$PWD/bench/build/pingpong-pontoon
streams=$PWD/bench/build/streams-pontoon
need "$pontoon"
need_built "$pp" "$streams"
RATES=${RATES:-"100 1000"}
RUNS=${RUNS:-3}
NODES=${NODES:-4}
PATTERNS=${PATTERNS-"1:1 2:1 4:1 4:4"}  # empty: latency only
PATHS=${PATHS:-"routed nat-proxy two-proxy"}
DELAY_MS=${DELAY_MS:-0}
LAT_ITERS=${LAT_ITERS:-2000}
tmp=$(mktemp -d)
beds=()
relay_pids=()
cleanup() {
    for p in "${relay_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for b in "${beds[@]}"; do "$pontoon" testbed down "$b" >/dev/null 2>&1 || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

# relay_cpu PID: its user + system CPU seconds.
relay_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
# relay_bytes LOG: bytes forwarded so far, from its last status line.
relay_bytes() { awk '/bytes forwarded/ { for (i = 1; i <= NF; i++) if ($i == "bytes") b = $(i - 1) } END { printf "%d\n", b }' "$1"; }

# job BED PATHS N HOSTFILE PROGRAM ARGS...: a job run from a-head of testbed BED.
job() {
    local bed=$1 paths=$2 n=$3 hosts=$4
    shift 4
    # The agent finds the testbed by PONTOON_TESTBED (two testbeds have these host names).
    # Punching failures are logged at info level: a run without its punched lanes says so
    # (returns 1; 2 when the job failed).
    local rc=0
    PONTOON_TESTBED=$bed "$pontoon" testbed exec -t "$bed" a-head -- \
        "$pontoon" run --hostfile "$hosts" --map-by slot --agent "$pontoon testbed agent" --no-relays \
        -x PONTOON_RELAYS="$relays" -x PONTOON_PATHS="$paths" -x PONTOON_YIELD=always \
        -x PONTOON_LOG=pontoon_runtime=info --timeout 300 -n "$n" "$@" >"$tmp/job.out" 2>"$tmp/job.err" || rc=$?
    if grep -q "no punched lane" "$tmp/job.err"; then
        echo "# $paths: punching failed, the row is left out: $(grep -m1 'no punched lane' "$tmp/job.err")" >&2
        return 1
    fi
    if ((rc)); then cat "$tmp/job.err" >&2; return 2; fi
    cat "$tmp/job.out"
}

for rate in $RATES; do
    v6="rl6-$$-$rate"
    v4="rl4-$$-$rate"
    "$pontoon" testbed up two-clusters --name "$v6" --nodes "$NODES" --rate-mbit "$rate" \
        --delay-ms "$DELAY_MS" >/dev/null
    beds+=("$v6")
    "$pontoon" testbed up two-clusters --name "$v4" --nodes "$NODES" --rate-mbit "$rate" \
        --delay-ms "$DELAY_MS" --no-ipv6 a --no-ipv6 b >/dev/null
    beds+=("$v4")
    # Standalone relays on the NAT'd testbed's heads.
    declare -A pid log
    for head in a-head b-head; do
        log[$head]=$tmp/$v4-$head.log
        # `testbed exec` replaces itself with the command: $! is the relay.
        "$pontoon" testbed exec -t "$v4" "$head" -- "$pontoon" relay --listen 0.0.0.0:7426 --listen '[::]:7426' \
            --status-every 1 >"${log[$head]}.out" 2>"${log[$head]}" &
        pid[$head]=$!
        relay_pids+=($!)
    done
    sleep 1
    relays="198.51.100.1:7426,[2001:db8::1]:7426;198.51.100.2:7426,[2001:db8::2]:7426"
    # Hostfiles: S senders on a-c1.., R receivers on b-c1..
    for pat in $PATTERNS latency; do
        if [[ $pat == latency ]]; then s=1 r=1; else s=${pat%:*} r=${pat#*:}; fi
        { for i in $(seq 1 "$s"); do echo "a-c$i slots=1"; done
          for i in $(seq 1 "$r"); do echo "b-c$i slots=1"; done; } >"$tmp/hosts-$pat"
    done
    declare -A cpu0 bytes0 cpu_sum bytes_sum
    relayed_paths=${PATHS/routed/}
    for path in $relayed_paths; do cpu_sum[$path]=0; bytes_sum[$path]=0; done
    for run in $(seq 1 "$RUNS"); do
        for path in $PATHS; do
            if [[ $path == routed ]]; then bed=$v6 kinds=direct; else bed=$v4 kinds=direct,$path; fi
            if [[ $path != routed ]]; then
                c=0 b=0
                for head in a-head b-head; do
                    c=$(awk -v a="$c" -v x="$(relay_cpu "${pid[$head]}")" 'BEGIN { print a + x }')
                    b=$((b + $(relay_bytes "${log[$head]}")))
                done
                cpu0[$path]=$c bytes0[$path]=$b
            fi
            [[ $path == punched ]] && kinds=direct,nat-proxy,punched
            { job "$bed" "$kinds" 2 "$tmp/hosts-latency" "$pp" 128 "$LAT_ITERS" || [[ $? == 1 ]]; } |
                awk -v r="$rate" -v p="$path" -v k="$run" '$1 == 128 { printf "%s,%s,latency,128,%s,%s\n", r, p, k, $2 }'
            for pat in $PATTERNS; do
                s=${pat%:*} r=${pat#*:}
                # About half a second of traffic per size at the rate (at least 2 MiB a sender).
                vol=$(( rate * 62500 / s ))
                (( vol < 2097152 )) && vol=2097152
                { job "$bed" "$kinds" $((s + r)) "$tmp/hosts-$pat" "$streams" "$s" "$r" 1024 1048576 "$vol" 4 || [[ $? == 1 ]]; } |
                    awk -v r="$rate" -v p="$path" -v k="$run" -v pat="$pat" \
                        '!/^#/ { printf "%s,%s,%s,%s,%s,%s\n", r, p, pat, $1, k, $2 }'
            done
            if [[ $path != routed ]]; then
                sleep 1.2 # the relays' status lines catch up
                c=0 b=0
                for head in a-head b-head; do
                    c=$(awk -v a="$c" -v x="$(relay_cpu "${pid[$head]}")" 'BEGIN { print a + x }')
                    b=$((b + $(relay_bytes "${log[$head]}")))
                done
                cpu_sum[$path]=$(awk -v a="${cpu_sum[$path]}" -v x="$c" -v y="${cpu0[$path]}" 'BEGIN { print a + x - y }')
                bytes_sum[$path]=$((bytes_sum[$path] + b - bytes0[$path]))
            fi
        done
    done
    for path in $relayed_paths; do
        awk -v r="$rate" -v p="$path" -v c="${cpu_sum[$path]}" -v b="${bytes_sum[$path]}" \
            'BEGIN { printf "%s,%s,relay-cpu,%d,0,%.3f\n", r, p, b, (b > 0 ? c / (b / 1e9) : 0) }'
    done
    for p in "${relay_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    relay_pids=()
    "$pontoon" testbed down "$v6" >/dev/null
    "$pontoon" testbed down "$v4" >/dev/null
    beds=()
    unset pid log cpu0 bytes0 cpu_sum bytes_sum
done
