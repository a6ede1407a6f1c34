# Shared by the bench/*.sh scripts (sourced, not run).

# stats FILE: "median min max" of the numbers in FILE, one per line.
stats() { sort -g "$1" | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f %.2f %.2f", m, v[1], v[NR] }'; }
