#!/usr/bin/env bash
# The 16:1 eager flood of bench/c/flood.c on one host, every MPI at its default settings:
# rank 0's peak resident memory (KiB) and the flood's time, medians (min-max) of RUNS
# alternating runs. pontoon runs the standard-ABI binary (mpicc_abi) that MPICH runs too;
# PONTOON_UNEXPECTED_CAP (default 64 MiB) bounds what it buffers. A run that takes longer
# than LIMIT seconds is cut and shown as such (MPICH busy-polls every rank: 17 ranks on
# 2 CPUs take many minutes).
#   bench/flood.sh   (RUNS=5 RANKS=17 COUNT=256 SIZE=32768 LIMIT=120: 128 MiB at rank 0)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh

RUNS=${RUNS:-5}
RANKS=${RANKS:-17}
COUNT=${COUNT:-256}
SIZE=${SIZE:-32768}
LIMIT=${LIMIT:-120}
MPICH_ABI="${PONTOON_MPICH_ABI:-$HOME/.local/share/pontoon/mpich-abi}"
pontoon=target/release/pontoon
b=bench/build
need "$pontoon"
make -s -C bench >/dev/null
need_built "$b/flood-abi" "$b/flood-openmpi" "$MPICH_ABI/bin/mpiexec"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() {
    case $1 in
        pontoon) timeout "$LIMIT" "$pontoon" run -n "$RANKS" --timeout 300 "$b/flood-abi" "$COUNT" "$SIZE" ;;
        mpich) timeout "$LIMIT" env -u LD_LIBRARY_PATH "$MPICH_ABI/bin/mpiexec" -n "$RANKS" "$b/flood-abi" "$COUNT" "$SIZE" ;;
        openmpi) timeout "$LIMIT" mpirun.openmpi --allow-run-as-root --oversubscribe -n "$RANKS" "$b/flood-openmpi" "$COUNT" "$SIZE" ;;
    esac
}

systems=(pontoon mpich openmpi)
for ((i = 0; i < RUNS; i++)); do
    for s in "${systems[@]}"; do
        line=$(run "$s" | grep '^flood ') || { echo "$s: no result within ${LIMIT} s" >&2; continue; }
        [[ $line == *" 0 bad bytes"* ]] || { echo "$s: $line" >&2; exit 1; }
        awk '{ for (i = 1; i <= NF; i++) if ($i == "RSS") print $(i + 1) }' <<<"$line" >>"$tmp/$s.rss"
        awk '{ for (i = 1; i <= NF; i++) if ($i == "s,") print $(i - 1) }' <<<"$line" >>"$tmp/$s.secs"
    done
done
echo "# $((RANKS - 1)):1 flood, $COUNT x $SIZE B per sender, one host, defaults, $RUNS runs"
echo "| system | rank 0 peak RSS KiB | time s |"
echo "|---|---|---|"
for s in "${systems[@]}"; do
    [[ -s $tmp/$s.rss ]] || { echo "| $s | no run finished within ${LIMIT} s | |"; continue; }
    read -r m lo hi <<<"$(stats "$tmp/$s.rss")"
    read -r tm tlo thi <<<"$(stats "$tmp/$s.secs")"
    printf "| %s | %.0f (%.0f-%.0f) | %s (%s-%s) |\n" "$s" "$m" "$lo" "$hi" "$tm" "$tlo" "$thi"
done
