#!/usr/bin/env bash
# The README's main command (`make demo`), after the release build: as root, one job of 8
# ranks across the `two-clusters` testbed — two NAT'd clusters whose compute nodes share
# the private subnet 10.0.0.0/24 and have no IPv6, every host with a docker-style bridge of
# the same address; pairs across the NAT come in through the relays that `pontoon run`
# starts on the two heads (seed 001's nat-proxy) — torn down afterwards; then the same
# clusters 2 ms apart, where pairs punch a direct lane through both NATs and leave the
# relay; then two hosts with two NICs each, where one NIC goes
# down in the middle of a transfer and the lane on the other carries it through; then a
# raw-Ethernet lane beside TCP; then two sites 50 ms apart, whose path gets parallel TCP
# streams, encrypted; then Slurm on two clusters of the testbed (`srun --mpi=pmi2`, plain `srun` without
# PMI, `salloc … pontoon run`, and one job across both clusters' Slurms), and seed 004's experiment in short (`pontoon bench experiment 004 --quick`); then N ranks on this
# host over shared memory (doctor naming the transports refused when 2 are held to TCP), with a C program's collectives across an intercommunicator and sends
# cancelled before anything matched them. As another user only the local ranks, saying why.
#
#   scripts/demo.sh [NP]     (NP: ranks of the local fallback, default 4)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pontoon=target/release/pontoon
examples=target/release/examples
np=${1:-4}

# Ranks of one host talk over shared memory; doctor shows which lane each pair took.
local_ranks() {
    echo "demo: $np ranks on this host: shared-memory lanes between them (pontoon doctor)"
    "$pontoon" run -n "$np" "$pontoon" doctor | sed -n '/^paths/,/^attempts/p' | sed '$d'
    echo "demo: 2 of them held to TCP: doctor names every transport refused, why, and what would help"
    "$pontoon" run -n 2 -x PONTOON_TRANSPORTS=tcp "$pontoon" doctor | sed -n '/^transports refused/,/^$/p'
    "$pontoon" run -n "$np" "$examples/ring"
    echo "demo: a C program through the standard ABI: every collective between the even and odd"
    echo "      ranks as an intercommunicator, blocking, non-blocking and persistent (tests/c/intercoll.c)"
    local cdir
    cdir=$(mktemp -d)
    target/release/pontoon-cc -O1 -o "$cdir/intercoll" tests/c/intercoll.c
    "$pontoon" run -n "$np" "$cdir/intercoll"
    echo "demo: MPI_Cancel of sends of 1 B to 1 MiB that no receive matched yet: the receiver"
    echo "      withdraws each (CANCEL/CANCELLED frames), MPI_Test_cancelled says so (tests/c/cancel.c)"
    target/release/pontoon-cc -O1 -o "$cdir/cancel" tests/c/cancel.c
    "$pontoon" run -n "$np" "$cdir/cancel"
    echo "demo: MPI_THREAD_MULTIPLE: eight threads per rank call MPI at once: streams on their own"
    echo "      tags, MPI_ANY_SOURCE in order per sending thread, MPI_Mprobe races, requests waited"
    echo "      for on other threads, collectives and MPI_Comm_dup on eight communicators at once"
    echo "      (tests/c/threads_multiple.c)"
    target/release/pontoon-cc -O1 -o "$cdir/threads_multiple" tests/c/threads_multiple.c
    "$pontoon" run -n "$np" "$cdir/threads_multiple"
    echo "demo: a progress thread (PONTOON_ASYNC_PROGRESS=on): rank 0 starts a 32 MiB send over TCP"
    echo "      and makes no MPI call; rank 1 receives it meanwhile (tests/c/async_progress.c),"
    echo "      which without the thread waits for rank 0's next call"
    target/release/pontoon-cc -O1 -o "$cdir/async_progress" tests/c/async_progress.c
    for progress in off on; do
        rm -f "$cdir/received"
        printf 'demo:   PONTOON_ASYNC_PROGRESS=%s: ' "$progress"
        "$pontoon" run -n 2 -x PONTOON_TRANSPORTS=tcp -x PONTOON_ASYNC_PROGRESS=$progress \
            "$cdir/async_progress" "$cdir/received" 2 | sed -n 1p
    done
    target/release/pontoon-cc -O1 -o "$cdir/first_alltoall" bench/c/first_alltoall.c
    echo "demo: 128 ranks on this host, every pair connected at once (one shared-memory segment"
    echo "      for the node, joined once through its first rank: a lane needs no handshake; each"
    echo "      writer sets its bit in the reader's bitmap, so a rank reads only the lanes written to)"
    local start
    start=$(date +%s.%N)
    "$pontoon" run -n 128 "$examples/all_connect" | tail -n 1
    echo "demo: 128 ranks wired up every pair in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }') s"
    echo "demo: 256 ranks, one MPI_Alltoall of an int right after MPI_Init (bench/c/first_alltoall.c):"
    echo "      all 256 on one host: on the node's collective area, one post, one wait and one read per rank, no message"
    start=$(date +%s.%N)
    "$pontoon" run -n 256 "$cdir/first_alltoall" >"$cdir/out"
    grep '^alltoall' "$cdir/out"
    awk -v s="$start" '$1 == "done" && $2 > m { m = $2 } END { printf "demo: the last of 256 ranks left its first collective %.2f s after the launch\n", m - s }' "$cdir/out"
    rm -rf "$cdir"
}

if [[ "$(id -u)" -ne 0 ]]; then
    echo "demo: not root, so no testbed (it needs network namespaces); running $np local ranks"
    local_ranks
    exit 0
fi

name="demo-$$"
nics="demo-nics-$$"
wan="demo-wan-$$"
lan="demo-lan-$$"
wide="demo-wide-$$"
slurm="demo-slurm-$$"
trap '"$pontoon" testbed down "$name" >/dev/null; "$pontoon" testbed down "$slurm" >/dev/null 2>&1; "$pontoon" testbed down "$wan" >/dev/null 2>&1; "$pontoon" testbed down "$nics" >/dev/null 2>&1; "$pontoon" testbed down "$lan" >/dev/null 2>&1; "$pontoon" testbed down "$wide" >/dev/null 2>&1' EXIT
"$pontoon" testbed up two-clusters --name "$name" --docker --no-ipv6 a --no-ipv6 b
echo
echo "demo: the hosts and their addresses (10.0.0.0/24 and 172.17.0.1 exist twice or more; no IPv6"
echo "      inside the clusters, so a compute node cannot be reached from the other cluster):"
"$pontoon" testbed status "$name"
echo
echo "demo: pontoon run --testbed $name -n 8 ring   (one rank per host, launcher on a-head; a relay"
echo "      runs on each head for the job, and every rank registers with the one that can reach it)"
"$pontoon" run --testbed "$name" -n 8 --tag-output "$examples/ring"
echo
echo "demo: pontoon doctor: nat-proxy = out through the own NAT, in through the relay on the"
echo "      other cluster's head (one user-level hop, seed 001)"
"$pontoon" run --testbed "$name" -n 8 "$pontoon" doctor | sed -n '/^paths/,/^attempts/p' | sed '$d'
echo
echo "demo: every rank connects to every other one, never to a same-address stranger:"
"$pontoon" run --testbed "$name" -n 8 "$examples/all_connect"
echo
"$pontoon" testbed up two-clusters --name "$wan" --nodes 2 --no-ipv6 a --no-ipv6 b --delay-ms 2 >/dev/null
echo "demo: the same clusters 2 ms apart (an emulated WAN between the heads): each pair across"
echo "      the NATs starts on the relay, then both ends dial each other at the same moment"
echo "      (TCP simultaneous open) and the punched lane takes the traffic"
"$pontoon" run --testbed "$wan" -n 6 "$pontoon" doctor | sed -n '/^paths/,/^attempts/p' | sed '$d'
"$pontoon" testbed down "$wan" >/dev/null
echo
"$pontoon" testbed up multinic --nodes 2 --name "$nics" >/dev/null
echo "demo: two hosts, two NICs each: a TCP lane per NIC and a raw-Ethernet lane per pair;"
echo "      256 MiB goes over the TCP lanes, and rank 0 takes the NIC of one down mid-way"
echo "      (nothing tells either end: the stall detector notices within"
echo "      PONTOON_LANE_TIMEOUT_MS, 1 s here, and the other lanes carry the rest)"
"$pontoon" run --testbed "$nics" -n 2 --timeout 60 -x PONTOON_LANE_TIMEOUT_MS=1000 "$examples/lane_failover" --down 2>&1
"$pontoon" testbed down "$nics" >/dev/null
echo
"$pontoon" testbed up lan --nodes 2 --name "$lan" >/dev/null
echo "demo: two hosts on one Ethernet segment, nothing configured: an eth lane (frames of"
echo "      EtherType 0x88B5 read from a receive ring, reliable through proto's own acks) beside TCP;"
echo "      small messages go raw, larger ones and bulk by TCP. 8-byte one-way latency, TCP alone"
echo "      (PONTOON_TRANSPORTS=tcp), eth alone, then both as chosen by default:"
"$pontoon" run --testbed "$lan" -n 2 "$pontoon" doctor | grep -E 'raw Ethernet' | sort -u
for t in tcp eth all; do
    printf '      %s: ' "$t"
    "$pontoon" run --testbed "$lan" -n 2 -x PONTOON_TRANSPORTS=$t "$examples/pingpong" --max 8 --iters 20000 | awk '$1 == 8 {print $2 " us"}'
done
"$pontoon" testbed down "$lan" >/dev/null
echo
"$pontoon" testbed up wan --nodes 1 --delay-ms 25 --wan-rate-mbit 1000 --loss-pct 0.1 --tcp-cc cubic --name "$wide" >/dev/null
echo "demo: two sites 50 ms apart over a 1 Gbit/s link that loses 0.1 %, the hosts on CUBIC:"
echo "      the lane's round trip makes it a WAN lane: its path gets parallel TCP streams, their"
echo "      bytes travel encrypted (PONTOON_ENCRYPT=wan), and small messages are coalesced; no"
echo "      site declared: the ranks' round trips to the launcher and their networks show two,"
echo "      and the collectives run site-aware"
"$pontoon" run --testbed "$wide" --host a-h1,b-h1 -n 2 "$pontoon" doctor \
    | sed -n -e '/^  [0-9]* on /p' -e '/^WAN paths/,/^$/p' -e '/^collectives/p'
"$pontoon" testbed down "$wide" >/dev/null
echo
"$pontoon" testbed up two-clusters --nodes 2 --slurm --name "$slurm" | sed -n 's/^Slurm/demo: Slurm/p'
echo "demo: srun --mpi=pmi2 -N 2 -n 4 ring on cluster a: Slurm starts the ranks, they meet through"
echo "      its PMI (no pontoon run); then salloc -N 2 pontoon run -n 4 on cluster b: srun starts"
echo "      each rank on an allocated node (docs/slurm.md)"
"$pontoon" testbed exec --testbed "$slurm" a-head -- srun --mpi=pmi2 -N 2 -n 4 "$examples/ring" | grep "^ring of"
echo "demo: plain srun -N 2 -n 4 ring (no PMI): task 0 starts pontoon's rendezvous, the others get"
echo "      the job's key from it in a munge credential; MPI_Abort(5) then ends the step with 5"
"$pontoon" testbed exec --testbed "$slurm" a-head -- env PONTOON_BIN="$pontoon" srun -N 2 -n 4 "$examples/ring" | grep "^ring of"
"$pontoon" testbed exec --testbed "$slurm" a-head -- env PONTOON_BIN="$pontoon" srun -N 2 -n 4 "$examples/abort_one" 2>/dev/null \
    || echo "srun exited with $?"
"$pontoon" testbed exec --testbed "$slurm" b-head -- salloc -N 2 "$pontoon" run -n 4 --tag-output hostname 2>&1 | sort
echo "demo: one pontoon run across both clusters, each starting its ranks through its own Slurm"
echo "      (hostfile: a-head slots=4 slurm, b-head slots=4 slurm)"
"$pontoon" run --testbed "$slurm" --host "a-head slots=4 slurm,b-head slots=4 slurm" -n 8 --tag-output hostname | sort | paste -sd' '
"$pontoon" run --testbed "$slurm" --host "a-head slots=4 slurm,b-head slots=4 slurm" -n 8 "$examples/ring" | grep "^ring of"
"$pontoon" testbed down "$slurm" >/dev/null
echo "demo: pontoon bench experiment 004 --quick: seed 004's experiment in short (one 20 ms"
echo "      link, CUBIC, 0.1 % loss): one stream against the streams, and 8 B messages with and"
echo "      without coalescing (the full run's report is docs/experiments/004.md)"
report=$(mktemp -d)
"$pontoon" bench experiment 004 --quick --out "$report" >/dev/null
sed -n '/^| claim/,/^$/p' "$report/004.md"
rm -rf "$report"
echo
local_ranks
