#!/usr/bin/env bash
# Builds mpi4py from its PyPI source against pontoon's standard ABI and runs mpi4py's own
# test suite under `pontoon run -n NP`, one test module at a time, printing a markdown table
# of passed / failed / errors / skipped per module (docs/mpi4py.md holds the last one).
#
#   scripts/mpi4py-tests.sh [NP...]        (default: 1 2 4)
#   MPI4PY_MODULES="test_comm test_p2p_obj" scripts/mpi4py-tests.sh 2   (some modules only)
#
# The build (once per set of exported functions: mpi4py's configure step records which
# ones the library has):
#   MPICC=pontoon-cc MPI4PY_BUILD_MPIABI=1 MPI4PY_BUILD_CONFIGURE=1 \
#       pip install --no-binary mpi4py mpi4py==$MPI4PY_VERSION
# into a virtual environment at $PONTOON_MPI4PY (default ~/.local/share/pontoon/mpi4py).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
nps=("$@")
[[ ${#nps[@]} -gt 0 ]] || nps=(1 2 4)
MPI4PY_VERSION="${MPI4PY_VERSION:-4.1.2}"
venv="${PONTOON_MPI4PY:-$HOME/.local/share/pontoon/mpi4py}"
pontoon="$here/target/release/pontoon"
cc="$here/target/release/pontoon-cc"
lib="$here/target/release/libmpi_abi.so"
per_module_timeout="${MPI4PY_TEST_TIMEOUT:-300}"

for f in "$pontoon" "$cc" "$lib"; do
    [[ -e "$f" ]] || { echo "mpi4py-tests: $f is missing: run make build first" >&2; exit 1; }
done

# ---- build (again when the library's exports changed) ---------------------------
stamp="$(nm -D --defined-only "$lib" | awk '{print $3}' | sort | sha256sum | cut -c1-16)"
if [[ "$(cat "$venv/.pontoon-exports" 2>/dev/null)" != "$stamp" ]]; then
    echo "mpi4py-tests: building mpi4py $MPI4PY_VERSION against pontoon in $venv (a few minutes)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" download -q --no-deps --no-binary :all: "mpi4py==$MPI4PY_VERSION" -d "$venv/src"
    rm -rf "$venv/src/mpi4py-$MPI4PY_VERSION"
    tar -xzf "$venv/src/mpi4py-$MPI4PY_VERSION.tar.gz" -C "$venv/src"
    MPICC="$cc" MPI4PY_BUILD_MPIABI=1 MPI4PY_BUILD_CONFIGURE=1 \
        "$venv/bin/pip" install -q --force-reinstall --no-deps --no-binary mpi4py \
        "$venv/src/mpi4py-$MPI4PY_VERSION.tar.gz" > "$venv/build.log" 2>&1 \
        || { echo "mpi4py-tests: the build failed; see $venv/build.log" >&2; exit 1; }
    echo "$stamp" > "$venv/.pontoon-exports"
fi

# ---- run ---------------------------------------------------------------------------
tests="$venv/src/mpi4py-$MPI4PY_VERSION/test"
modules=${MPI4PY_MODULES:-$(cd "$tests" && ls test_*.py | sed 's/\.py$//')}
log="$venv/logs"
mkdir -p "$log"
printf '| module |'; for np in "${nps[@]}"; do printf ' -n %s |' "$np"; done; printf '\n'
printf '| --- |'; for _ in "${nps[@]}"; do printf ' --- |'; done; printf '\n'
declare -A total
for mod in $modules; do
    printf '| %s |' "$mod"
    for np in "${nps[@]}"; do
        out="$log/$mod.n$np.log"
        (cd "$tests" && "$pontoon" run -n "$np" --timeout "$per_module_timeout" \
            "$venv/bin/python" main.py -i "^${mod}\\.py\$" > "$out" 2>&1) || true
        ran=$(grep -Eo '^Ran [0-9]+ test' "$out" | head -1 | grep -Eo '[0-9]+' || true)
        # Tests, not subtests: a test with several failing subtests counts once.
        f=$(grep -E '^FAIL: ' "$out" | awk '{print $2, $3}' | sort -u | wc -l || true)
        e=$(grep -E '^ERROR: ' "$out" | awk '{print $2, $3}' | sort -u \
            | grep -vxF -f <(grep -E '^FAIL: ' "$out" | awk '{print $2, $3}' | sort -u) | wc -l || true)
        s=$(grep -Eo 'skipped=[0-9]+' "$out" | head -1 | cut -d= -f2 || true)
        if [[ -z "$ran" ]]; then
            cell="did not finish"
            total[$np.crash]=$((${total[$np.crash]:-0} + 1))
        else
            f=${f:-0} e=${e:-0} s=${s:-0}
            pass=$((ran - f - e - s))
            cell="$pass / $f / $e / $s"
            total[$np.pass]=$((${total[$np.pass]:-0} + pass))
            total[$np.fail]=$((${total[$np.fail]:-0} + f))
            total[$np.err]=$((${total[$np.err]:-0} + e))
            total[$np.skip]=$((${total[$np.skip]:-0} + s))
        fi
        printf ' %s |' "$cell"
    done
    printf '\n'
done
printf '| **total** |'
for np in "${nps[@]}"; do
    printf ' %s / %s / %s / %s (%s did not finish) |' "${total[$np.pass]:-0}" "${total[$np.fail]:-0}" \
        "${total[$np.err]:-0}" "${total[$np.skip]:-0}" "${total[$np.crash]:-0}"
done
printf '\n\ncells: passed / failed / errors / skipped; logs in %s\n' "$log"
