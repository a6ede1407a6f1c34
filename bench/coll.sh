#!/usr/bin/env bash
# Collective latency of pontoon against MPICH and Open MPI on this host, in one run:
# allreduce (double, SUM) and bcast (bytes) at 8 B, 64 KiB and 4 MiB, on 4 and 8 local ranks
# (the same method in bench/c/coll.c and crates/pontoon/examples/coll_bench.rs).
# PATHS=default: every MPI at its default settings (shared memory on one host, for all three).
# PATHS=tcp: everyone forced onto TCP: pontoon with PONTOON_TRANSPORTS=tcp, MPICH (ch4:ucx)
# with UCX_TLS=tcp,self, Open MPI with --mca pml ob1 --mca btl tcp,self. Ranks outnumber the 2
# cores (with NPS above 2), so nobody is
# pinned, and each runs in its default mode: Open MPI and pontoon (PONTOON_YIELD=auto) yield the
# CPU between polls when oversubscribed; MPICH over UCX keeps spinning, which makes it very slow
# here (each MPICH run is cut off after MPICH_TIMEOUT seconds; its missing figures show as n/a).
# Runs alternate between the three; prints medians (min-max) of RUNS runs in microseconds and
# pontoon / the better MPI.
#
#   bench/coll.sh            (RUNS=3 ITERS=1000 NPS="4 8" PATHS=default MPICH_RUNS=$RUNS MPICH_TIMEOUT=240 by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

RUNS=${RUNS:-3}
# MPICH spins when oversubscribed and takes minutes per run at 8 ranks: it may run
# in fewer of the rounds than the others.
MPICH_RUNS=${MPICH_RUNS:-$RUNS}
ITERS=${ITERS:-1000}
NPS=${NPS:-4 8}
PATHS=${PATHS:-default}
case $PATHS in
    default) pontoon_env=() mpich_env=() openmpi_force=() ;;
    tcp)
        pontoon_env=(PONTOON_TRANSPORTS=tcp) mpich_env=(UCX_TLS=tcp,self)
        openmpi_force=(--mca pml ob1 --mca btl tcp,self)
        ;;
    *) echo "PATHS is default or tcp, not '$PATHS'" >&2; exit 1 ;;
esac
pontoon=target/release/pontoon
need "$pontoon" target/release/examples/coll_bench bench/build/coll-mpich bench/build/coll-openmpi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

record() { # IMPL NP < "op size usec" lines
    while read -r op size us; do echo "$us" >>"$tmp/$1-$2-$op-$size"; done
}

for i in $(seq "$RUNS"); do
    for np in $NPS; do
        if ((i <= MPICH_RUNS)); then
            { env "${mpich_env[@]}" timeout "${MPICH_TIMEOUT:-240}" mpiexec.mpich -n "$np" bench/build/coll-mpich "$ITERS" 2>/dev/null || true; } |
                grep -E '^[a-z]+ [0-9]+ [0-9.]+$' | record mpich "$np"
        fi
        mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none -n "$np" \
            "${openmpi_force[@]}" bench/build/coll-openmpi "$ITERS" | record openmpi "$np"
        env "${pontoon_env[@]}" "$pontoon" run -n "$np" target/release/examples/coll_bench "$ITERS" |
            record pontoon "$np"
    done
done

echo "paths: $PATHS; $RUNS runs"
echo
echo "| operation | ranks | MPICH µs | Open MPI µs | pontoon µs | pontoon / better MPI |"
echo "|---|---|---|---|---|---|"
for op in allreduce bcast; do
    for size in 8 65536 4194304; do
        for np in $NPS; do
            read -r o olo ohi <<<"$(stats "$tmp/openmpi-$np-$op-$size" 3)"
            read -r p plo phi <<<"$(stats "$tmp/pontoon-$np-$op-$size" 3)"
            if [[ -s $tmp/mpich-$np-$op-$size ]]; then
                read -r m mlo mhi <<<"$(stats "$tmp/mpich-$np-$op-$size" 3)"
                mpich="$m ($mlo-$mhi)"
                best=$(awk -v a="$m" -v b="$o" 'BEGIN { print (a < b) ? a : b }')
            else
                mpich="n/a" best=$o
            fi
            printf "| %s %s B | %s | %s | %s (%s-%s) | %s (%s-%s) | %.2fx |\n" "$op" "$size" "$np" \
                "$mpich" "$o" "$olo" "$ohi" "$p" "$plo" "$phi" \
                "$(awk -v p="$p" -v b="$best" 'BEGIN { print p / b }')"
        done
    done
done
