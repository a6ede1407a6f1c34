# Shared by the bench/*.sh scripts (sourced, not run).

# stats FILE: "median min max" of the numbers in FILE, one per line.
stats() { sort -g "$1" | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f %.2f %.2f", m, v[1], v[NR] }'; }

# need FILE...: stop with a hint unless every FILE is an executable (a release build).
need() {
    local f
    for f in "$@"; do
        [[ -x $f ]] || { echo "missing $f: cargo build --release --workspace --examples --bins" >&2; exit 1; }
    done
}

# need_root: testbeds are network namespaces.
need_root() { [[ "$(id -u)" -eq 0 ]] || { echo "needs root (network namespaces)" >&2; exit 1; }; }
