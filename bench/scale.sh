#!/usr/bin/env bash
# Many ranks on one host (issue 21): wall time of a whole job whose first collective is an
# alltoall (bench/c/first_alltoall.c: start-up, wire-up of every pair, the alltoall,
# finalize) for 16 to 256 ranks, pontoon at its defaults (shared memory) beside Open MPI
# over TCP (--mca pml ob1 --mca btl tcp,self, as the issue compares), runs alternating.
# Ranks outnumber the CPUs: nobody is pinned, each MPI yields its CPU as it does by
# default when oversubscribed. Prints medians (min-max) of RUNS runs in seconds, the
# ratio, and each system's growth from the previous size (2.0 = linear in the ranks):
# first for whole jobs, then for the time from the launch to the end of the first
# collective (the last rank's alltoall returning).
#
#   bench/scale.sh          (RUNS=3 NS="16 32 64 128 256" TIMEOUT=300 by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

RUNS=${RUNS:-3}
NS=${NS:-16 32 64 128 256}
TIMEOUT=${TIMEOUT:-300}
need target/release/pontoon
need_built bench/build/first_alltoall-pontoon bench/build/first_alltoall-openmpi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# timed FILE CMD...: appends the wall seconds of CMD to FILE if it succeeded, and to
# FILE.first the seconds to the latest "done" time a rank printed.
timed() {
    local file=$1 start end
    shift
    start=$(date +%s.%N)
    if timeout "$TIMEOUT" "$@" >"$tmp/out" 2>&1 && grep -q "ok" "$tmp/out"; then
        end=$(date +%s.%N)
        awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f\n", e - s }' >>"$file"
        awk -v s="$start" '$1 == "done" && $2 > m { m = $2 } END { printf "%.3f\n", m - s }' "$tmp/out" >>"$file.first"
    else
        echo "  failed or timed out: $*" >&2
        tail -3 "$tmp/out" >&2
    fi
}

for n in $NS; do
    for _ in $(seq "$RUNS"); do
        timed "$tmp/p$n" target/release/pontoon run -n "$n" --timeout "$TIMEOUT" bench/build/first_alltoall-pontoon
        timed "$tmp/o$n" mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1 \
            --mca btl tcp,self -n "$n" bench/build/first_alltoall-openmpi
    done
done

# table SUFFIX TITLE: the table of the runs' FILE$SUFFIX figures.
table() {
    echo
    echo "$2"
    echo
    echo "| ranks | pontoon (s) | Open MPI over TCP (s) | pontoon / Open MPI | pontoon growth | Open MPI growth |"
    echo "|---|---|---|---|---|---|"
    local prev_p='' prev_o='' p pmin pmax o omin omax
    for n in $NS; do
        read -r p pmin pmax <<<"$(stats "$tmp/p$n$1" 3)"
        read -r o omin omax <<<"$(stats "$tmp/o$n$1" 3)"
        growth() { [[ -n $1 ]] && awk -v a="$2" -v b="$1" 'BEGIN { printf "%.2fx", a / b }' || echo "-"; }
        printf "| %s | %s (%s-%s) | %s (%s-%s) | %.3f | %s | %s |\n" "$n" "$p" "$pmin" "$pmax" "$o" "$omin" "$omax" \
            "$(awk -v p="$p" -v o="$o" 'BEGIN { print p / o }')" "$(growth "$prev_p" "$p")" "$(growth "$prev_o" "$o")"
        [[ -n ${first_p:-} ]] || first_p=$p first_o=$o first_n=$n
        prev_p=$p prev_o=$o
    done
    # Linear growth is as many times the time as the ranks.
    awk -v n0="$first_n" -v n="$n" -v p0="$first_p" -v p="$p" -v o0="$first_o" -v o="$o" \
        'BEGIN { printf "\n%d to %d ranks, %gx the ranks: pontoon %.1fx the time, Open MPI %.1fx\n", n0, n, n / n0, p / p0, o / o0 }'
    unset first_p first_o first_n
}
table "" "Whole jobs (start-up, wire-up, the alltoall, finalize):"
table ".first" "From the launch to the end of the first collective:"
