#!/usr/bin/env bash
# bench/c/pingpong.c on 2 ranks, side by side: built with pontoon-cc and run on pontoon;
# built once with PyPI mpich's mpicc_abi and run unmodified on pontoon and on MPICH; built
# with Debian Open MPI's mpicc. MPICH and Open MPI are forced onto TCP (pontoon has no
# shared memory yet): MPICH with MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self (ch4:ucx), Open MPI
# with --mca pml ob1 --mca btl tcp,self. Every job is pinned one rank per CPU. Runs
# alternate between the systems, RUNS times; prints medians (min-max) of the one-way latency
# at 8 B and the bandwidth at 4 MiB, and pontoon's ratio against the better of the two MPIs.
#
#   bench/c-abi.sh              (RUNS=3 ITERS=10000; needs make build, make -C bench, --anchors)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RUNS=${RUNS:-3}
ITERS=${ITERS:-10000}
MPICH_ABI="${PONTOON_MPICH_ABI:-$HOME/.local/share/pontoon/mpich-abi}"
pontoon=target/release/pontoon
b=bench/build
for f in "$pontoon" "$b/pingpong-pontoon" "$b/pingpong-abi" "$b/pingpong-openmpi" "$MPICH_ABI/bin/mpiexec"; do
    [[ -x $f ]] || { echo "missing $f: make build && make -C bench (anchors: scripts/install-deps.sh --anchors)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(4194304 "$ITERS")

run() { # name command...
    local name=$1
    shift
    if ! timeout 300 "$@" "${args[@]}" >"$tmp/out" 2>"$tmp/err"; then
        echo "$name failed: $(tail -3 "$tmp/err")" >&2
        return
    fi
    awk '$1 == 8 { print $2 }' "$tmp/out" >>"$tmp/$name.lat"
    awk '$1 == 4194304 { print $3 }' "$tmp/out" >>"$tmp/$name.bw"
}

for i in $(seq "$RUNS"); do
    run pontoon "$pontoon" run -n 2 --bind-to core "$b/pingpong-pontoon"
    run abi-on-pontoon "$pontoon" run -n 2 --bind-to core "$b/pingpong-abi"
    run abi-on-mpich env -u LD_LIBRARY_PATH MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self \
        "$MPICH_ABI/bin/mpiexec" -n 2 -bind-to core "$b/pingpong-abi"
    run openmpi mpirun.openmpi --allow-run-as-root -n 2 --bind-to core \
        --mca pml ob1 --mca btl tcp,self "$b/pingpong-openmpi"
done

stats() { # file -> "median (min-max)"
    sort -g "$1" | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%s (%s-%s)\n", m, v[1], v[NR] }'
}
median() { stats "$1" | cut -d' ' -f1; }

printf '%-16s %-26s %-26s\n' system "8 B one-way (us)" "4 MiB bandwidth (MB/s)"
for s in pontoon abi-on-pontoon abi-on-mpich openmpi; do
    [[ -f $tmp/$s.lat ]] || continue
    printf '%-16s %-26s %-26s\n' "$s" "$(stats "$tmp/$s.lat")" "$(stats "$tmp/$s.bw")"
done
best_lat=$(printf '%s\n%s\n' "$(median "$tmp/abi-on-mpich.lat" 2>/dev/null)" "$(median "$tmp/openmpi.lat" 2>/dev/null)" | grep -v '^-\?$' | sort -g | head -1)
best_bw=$(printf '%s\n%s\n' "$(median "$tmp/abi-on-mpich.bw" 2>/dev/null)" "$(median "$tmp/openmpi.bw" 2>/dev/null)" | grep -v '^-\?$' | sort -g | tail -1)
for s in pontoon abi-on-pontoon; do
    [[ -f $tmp/$s.lat && -n $best_lat && -n $best_bw ]] || continue
    awk -v s="$s" -v l="$(median "$tmp/$s.lat")" -v bl="$best_lat" -v w="$(median "$tmp/$s.bw")" -v bw="$best_bw" \
        'BEGIN { printf "%s / better MPI: latency %.2fx (target <= 0.85), bandwidth %.2fx (target >= 1.0)\n", s, l / bl, w / bw }'
done
echo "($RUNS runs, $ITERS iterations at 8 B; pinned one rank per CPU; MPICH and Open MPI on TCP)"
