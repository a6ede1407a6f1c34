#!/usr/bin/env bash
# Builds every cargo-fuzz target in fuzz/ and runs each for a few seconds; fails on
# the first crash, panic, timeout or out-of-memory of any target (all targets still run).
#
#   scripts/fuzz-smoke.sh [SECONDS]     seconds per target (default 20, or $FUZZ_SECONDS)
#   scripts/fuzz-smoke.sh --check       exit 0 when the fuzz tooling is usable here, else say why and exit 1
#
# Environment:
#   FUZZ_SECONDS    seconds per target when no argument is given (default 20)
#   FUZZ_TARGETS    space-separated subset of targets (default: all, from `cargo fuzz list`)
#   FUZZ_SANITIZER  none (default: the fuzzed code is safe Rust) | address | ... (needs nightly)
#   FUZZ_TOOLCHAIN  rustup toolchain for cargo, e.g. nightly (default: the default toolchain)
#
# Corpora grow in fuzz/corpus/<target>/ and crashes land in fuzz/artifacts/<target>/
# (both git-ignored); libFuzzer's output of each run is kept in fuzz/target/smoke/<target>.log.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SANITIZER="${FUZZ_SANITIZER:-none}"
CARGO=(cargo)
if [[ -n "${FUZZ_TOOLCHAIN:-}" ]]; then
    CARGO=(cargo "+$FUZZ_TOOLCHAIN")
fi

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

have_tooling() {
    command -v cargo >/dev/null 2>&1 && "${CARGO[@]}" fuzz --version >/dev/null 2>&1 \
        && command -v c++ >/dev/null 2>&1
}

explain_missing() {
    if ! command -v cargo >/dev/null 2>&1; then
        echo "fuzz-smoke: cargo not found (run scripts/install-deps.sh)" >&2
    elif ! "${CARGO[@]}" fuzz --version >/dev/null 2>&1; then
        echo "fuzz-smoke: cargo-fuzz not found: install it with 'cargo install cargo-fuzz --locked'" \
            "(scripts/install-deps.sh does)" >&2
    else
        echo "fuzz-smoke: no C++ compiler (c++) to build libFuzzer: install build-essential" >&2
    fi
}

SECONDS_PER_TARGET="${FUZZ_SECONDS:-20}"
case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    --check)
        have_tooling && exit 0
        explain_missing
        exit 1
        ;;
    "") ;;
    *) SECONDS_PER_TARGET="$1" ;;
esac
if ! [[ "$SECONDS_PER_TARGET" =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz-smoke: seconds per target must be a positive integer, got '$SECONDS_PER_TARGET'" >&2
    exit 2
fi
if ! have_tooling; then
    explain_missing
    exit 1
fi

start=$(date +%s)
echo "fuzz-smoke: $("${CARGO[@]}" fuzz --version), $("${CARGO[@]}" --version), sanitizer $SANITIZER"
echo "fuzz-smoke: building all targets"
"${CARGO[@]}" fuzz build --sanitizer "$SANITIZER"
built=$(date +%s)

if [[ -n "${FUZZ_TARGETS:-}" ]]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
else
    mapfile -t targets < <("${CARGO[@]}" fuzz list)
fi
if [[ ${#targets[@]} -eq 0 ]]; then
    echo "fuzz-smoke: no fuzz targets found in fuzz/" >&2
    exit 1
fi

logdir="fuzz/target/smoke"
mkdir -p "$logdir"
failed=()
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    log="$logdir/$t.log"
    # -timeout: one input running longer than 10 s counts as a hang (a failure);
    # timeout(1) only guards against the fuzzer itself not stopping.
    if timeout --kill-after=10 $((SECONDS_PER_TARGET + 300)) \
        "${CARGO[@]}" fuzz run --sanitizer "$SANITIZER" "$t" -- \
        -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1; then
        runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
        printf 'fuzz-smoke: %-28s ok   %10s runs in %ss, coverage %s\n' "$t" "${runs:-?}" \
            "$SECONDS_PER_TARGET" "${cov:-?}"
    else
        rc=$?
        failed+=("$t")
        printf 'fuzz-smoke: %-28s FAILED (exit %s), full output in %s:\n' "$t" "$rc" "$log"
        # The panic or sanitizer report, and the failing input; else the log's end.
        if grep -q -E "panicked at|ERROR: libFuzzer|==ERROR" "$log"; then
            grep -m 1 -A 6 -E "panicked at|ERROR: libFuzzer|==ERROR" "$log" | sed 's/^/    /'
            sed -n '/^Output of `std::fmt::Debug`:/,/^Reproduce with:/p' "$log" | grep -v -e '^Reproduce' -e '^$' \
                | sed 's/^/    /'
        else
            tail -n 30 "$log" | sed 's/^/    /'
        fi
        artifact=$(grep -o 'fuzz/artifacts/[^ ]*' "$log" | tail -n 1 || true)
        if [[ -n "$artifact" ]]; then
            echo "    reproduce: cargo fuzz run --sanitizer $SANITIZER $t $artifact"
        fi
    fi
done

end=$(date +%s)
echo "fuzz-smoke: build $((built - start)) s, runs $((end - built)) s, total $((end - start)) s"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz-smoke: FAILED: ${failed[*]} (of ${#targets[@]} targets)" >&2
    exit 1
fi
echo "fuzz-smoke: all ${#targets[@]} targets ran ${SECONDS_PER_TARGET} s each without a crash"
