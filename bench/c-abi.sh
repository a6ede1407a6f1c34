#!/usr/bin/env bash
# The plain-MPI programs of bench/c (pingpong.c, bibw.c, allreduce.c) on 2 ranks, side by
# side, in one table:
#   pontoon         built with pontoon-cc, run by `pontoon run`;
#   abi-on-pontoon  built once with PyPI mpich's mpicc_abi (the MPI standard ABI) and run
#   abi-on-mpich    unmodified on pontoon and on MPICH: the apples-to-apples pair;
#   openmpi         built with Debian Open MPI's mpicc.
# PATHS=default: every MPI at its default settings, as a user would run it (on one host:
# shared memory for all three). PATHS=tcp: every MPI forced onto TCP: pontoon with
# PONTOON_TRANSPORTS=tcp, MPICH (ch4:ucx) with UCX_TLS=tcp,self (plus MPIR_CVAR_NOLOCAL=1
# on one host), Open MPI with --mca pml ob1 --mca btl tcp,self. Runs alternate between the
# systems, RUNS times; prints medians (min-max) and each pontoon row's ratio against the
# better of MPICH and Open MPI.
#
# WHERE=loopback (default): both ranks on this host, pinned one per CPU (--bind-to core).
# WHERE=testbed (root): one rank on each host of a `lan --nodes 2` testbed (two network
# namespaces joined by a bridge), built and removed here; every launcher starts on h1 and
# reaches h2 through the testbed's ssh-like agent; rank r is pinned to CPU r.
#
#   bench/c-abi.sh              (RUNS=3 ITERS=10000 WHERE=loopback PATHS=default by default)
# Builds what is missing with `make -C bench` (needs `make build` and the anchors:
# scripts/install-deps.sh --anchors).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

RUNS=${RUNS:-3}
ITERS=${ITERS:-10000}
WHERE=${WHERE:-loopback}
PATHS=${PATHS:-default}
MPICH_ABI="${PONTOON_MPICH_ABI:-$HOME/.local/share/pontoon/mpich-abi}"
pontoon=target/release/pontoon
b=bench/build
programs=(pingpong bibw allreduce)
[[ -x $pontoon ]] || { echo "missing $pontoon: make build" >&2; exit 1; }
make -s -C bench >/dev/null
for p in "${programs[@]}"; do
    need_built "$b/$p-pontoon" "$b/$p-abi" "$b/$p-openmpi" "$MPICH_ABI/bin/mpiexec"
done

tmp=$(mktemp -d)
case $PATHS in
    default) pontoon_env=() openmpi_force=() ;;
    tcp) pontoon_env=(env PONTOON_TRANSPORTS=tcp) openmpi_force=(--mca pml ob1 --mca btl tcp,self) ;;
    *) echo "PATHS is default or tcp, not '$PATHS'" >&2; exit 1 ;;
esac
case $WHERE in
    loopback)
        trap 'rm -rf "$tmp"' EXIT
        on_h1=() pontoon_job=(-n 2) pin=() mpich_env=()
        [[ $PATHS == tcp ]] && mpich_env=(MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self)
        mpich_job=(-n 2 -bind-to core) openmpi_job=(-n 2 --bind-to core)
        placement="one host, pinned one rank per CPU"
        ;;
    testbed)
        [[ "$(id -u)" -eq 0 ]] || { echo "WHERE=testbed needs root (network namespaces)" >&2; exit 1; }
        bed="cabi-$$"
        trap 'rm -rf "$tmp"; "$pontoon" testbed down "$bed" >/dev/null' EXIT
        "$pontoon" testbed up lan --nodes 2 --name "$bed" >/dev/null
        agent=/run/pontoon-testbed/$bed/agent
        on_h1=("$pontoon" testbed exec -t "$bed" h1 --) pontoon_job=(--testbed "$bed" -n 2)
        pin=(bench/pin-rank.sh) mpich_env=(UCX_NET_DEVICES=eth0)
        [[ $PATHS == tcp ]] && mpich_env+=(UCX_TLS=tcp,self)
        mpich_job=(-launcher ssh -launcher-exec "$agent" -hosts h1,h2 -n 2 -bind-to none)
        openmpi_job=(--mca plm_rsh_agent "$agent" --host h1,h2 -n 2 --map-by node --bind-to none)
        placement="two namespace hosts (testbed lan: veth + bridge), rank r pinned to CPU r"
        ;;
    *) echo "WHERE is loopback or testbed, not '$WHERE'" >&2; exit 1 ;;
esac

# The command line of `system` running `program` (arguments follow).
command_of() {
    local system=$1 program=$2
    case $system in
        pontoon) echo "${pontoon_env[@]}" "$pontoon" run "${pontoon_job[@]}" --bind-to core "$b/$program-pontoon" ;;
        abi-on-pontoon) echo "${pontoon_env[@]}" "$pontoon" run "${pontoon_job[@]}" --bind-to core "$b/$program-abi" ;;
        abi-on-mpich) echo "${on_h1[@]}" env -u LD_LIBRARY_PATH "${mpich_env[@]}" \
            "$MPICH_ABI/bin/mpiexec" "${mpich_job[@]}" "${pin[@]}" "$b/$program-abi" ;;
        openmpi) echo "${on_h1[@]}" mpirun.openmpi --allow-run-as-root "${openmpi_job[@]}" \
            "${openmpi_force[@]}" "${pin[@]}" "$b/$program-openmpi" ;;
    esac
}
args_of() {
    case $1 in
        pingpong) echo 4194304 "$ITERS" ;;
        bibw) echo 4194304 50 64 ;;
        allreduce) echo 4194304 "$((ITERS / 10))" ;;
    esac
}
# figure name, program, size row, column of the program's output, unit
figures=(
    "pingpong 8 B one-way (us)|pingpong|8|2"
    "pingpong 64 KiB (MB/s)|pingpong|65536|3"
    "pingpong 4 MiB (MB/s)|pingpong|4194304|3"
    "bibw 64 KiB (MB/s)|bibw|65536|2"
    "bibw 4 MiB (MB/s)|bibw|4194304|2"
    "allreduce 8 B (us)|allreduce|8|2"
    "allreduce 64 KiB (us)|allreduce|65536|2"
    "allreduce 4 MiB (us)|allreduce|4194304|2"
)
systems=(pontoon abi-on-pontoon abi-on-mpich openmpi)

for i in $(seq "$RUNS"); do
    for program in "${programs[@]}"; do
        for system in "${systems[@]}"; do
            # shellcheck disable=SC2046 # words of command_of and args_of are meant to split
            if ! timeout 300 $(command_of "$system" "$program") $(args_of "$program") >"$tmp/out" 2>"$tmp/err"; then
                echo "$system $program failed: $(tail -3 "$tmp/err")" >&2
                continue
            fi
            for f in "${!figures[@]}"; do
                IFS='|' read -r _ prog size col <<<"${figures[$f]}"
                [[ $prog == "$program" ]] || continue
                awk -v s="$size" -v c="$col" '$1 == s { print $c }' "$tmp/out" >>"$tmp/$system.$f"
            done
        done
    done
    echo "run $i/$RUNS done" >&2
done

spread() { # file -> "median (min-max)"
    [[ -s $1 ]] || { echo "-"; return; }
    sort -g "$1" | awk '{ v[NR] = $1 } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%s (%s-%s)\n", m, v[1], v[NR] }'
}
median() { spread "$1" | cut -d' ' -f1; }

echo "$WHERE, $RUNS runs; $placement; paths: $PATHS"
echo
printf '| system |'
for f in "${figures[@]}"; do printf ' %s |' "${f%%|*}"; done
printf '\n|---|'
for _ in "${figures[@]}"; do printf -- '---|'; done
echo
for system in "${systems[@]}"; do
    printf '| %s |' "$system"
    for f in "${!figures[@]}"; do printf ' %s |' "$(spread "$tmp/$system.$f")"; done
    echo
done
for system in pontoon abi-on-pontoon; do
    printf '| %s / better MPI |' "$system"
    for f in "${!figures[@]}"; do
        mine=$(median "$tmp/$system.$f") a=$(median "$tmp/abi-on-mpich.$f") o=$(median "$tmp/openmpi.$f")
        # Times: lower is better; bandwidths: higher is better.
        awk -v m="$mine" -v a="$a" -v o="$o" -v t="${figures[$f]}" 'BEGIN {
            if (m == "-" || (a == "-" && o == "-")) { printf " - |"; exit }
            time = (t ~ /\(us\)/)
            best = (a == "-") ? o : (o == "-") ? a : (time ? (a < o ? a : o) : (a > o ? a : o))
            printf " %.2fx |", m / best }'
    done
    echo
done
echo
echo "Targets (issue 16, PATHS=default on one host): 8 B one-way <= 0.8x the better MPI; 64 KiB and"
echo "4 MiB bandwidth >= 1.0x. (Issue 4, PATHS=tcp: 8 B <= 0.85x; 4 MiB >= 1.0x.)"
