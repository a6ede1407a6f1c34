# Shared by the bench/*.sh scripts (sourced, not run).

# stats FILE [DECIMALS]: "median min max" of the numbers in FILE, one per line (2 decimals
# unless told).
stats() { sort -g "$1" | awk -v d="${2:-2}" '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.*f %.*f %.*f", d, m, d, v[1], d, v[NR] }'; }

# compare_row LABEL BASE_FILE OTHER_FILE [DIGITS]: a markdown table row
# "| LABEL | base median (min-max) | other median (min-max) | other / base |".
compare_row() {
    local b bmin bmax o omin omax
    read -r b bmin bmax <<<"$(stats "$2")"
    read -r o omin omax <<<"$(stats "$3")"
    printf "| %s | %s (%s-%s) | %s (%s-%s) | %.${4:-2}fx |\n" "$1" "$b" "$bmin" "$bmax" "$o" "$omin" "$omax" \
        "$(awk -v o="$o" -v b="$b" 'BEGIN { print o / b }')"
}

# need FILE...: stop with a hint unless every FILE is an executable (a release build).
need() {
    local f
    for f in "$@"; do
        [[ -x $f ]] || { echo "missing $f: cargo build --release --workspace --examples --bins" >&2; exit 1; }
    done
}

# need_root: testbeds are network namespaces.
need_root() { [[ "$(id -u)" -eq 0 ]] || { echo "needs root (network namespaces)" >&2; exit 1; }; }

# need_built FILE...: stop with a hint unless every FILE (a bench program or an MPI
# anchor's launcher) is an executable.
need_built() {
    local f
    for f in "$@"; do
        [[ -x $f ]] || { echo "missing $f: make -C bench (anchors: scripts/install-deps.sh --anchors)" >&2; exit 1; }
    done
}
