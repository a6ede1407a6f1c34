#!/usr/bin/env bash
# Site-aware against flat collectives (issue 19): 8 ranks on the `wan` testbed, two sites of
# 4 hosts joined by a 1 Gbit/s link with 10 ms one-way delay (20 ms RTT), ranks placed by
# site and interleaved (rank i at site i mod 2). Per round and placement: `pontoon bench`
# with the sites declared (`--sites`: site-aware), then flat (PONTOON_COLL_HIER=0); then
# MPICH and Open MPI once each, interleaved (slow across the WAN). Prints a markdown table of
# medians (min-max) in ms at 8 B, 64 KiB and 4 MiB (allgather and alltoall: 512 KiB per
# block, so 4 MiB per rank, as the issue's 8 × 512 KiB). Needs root.
# Then 8 B latency from a common start (bench/c/arrival.c: every call starts on every rank
# at one instant of the clock the testbed's hosts share, and lasts until the last rank
# returns), site-aware against flat: at 8 B the OSU averages above carry the skew the
# barrier between calls leaves across the WAN, which says more about the barrier.
#
#   RUNS=3 bench/sites.sh            (raw JSON kept in $OUT, default a temporary directory;
#                                     ANCHORS=0 leaves MPICH and Open MPI out)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
RUNS=${RUNS:-3}
OUT=${OUT:-$(mktemp -d)}
P=target/release/pontoon
bed="sites-$$"
trap '"$P" testbed down "$bed" >/dev/null 2>&1' EXIT
"$P" testbed up wan --nodes 4 --delay-ms 10 --wan-rate-mbit 1000 --name "$bed" >/dev/null
declare -A hosts=([site]=a-h1,a-h2,a-h3,a-h4,b-h1,b-h2,b-h3,b-h4 [inter]=a-h1,b-h1,a-h2,b-h2,a-h3,b-h3,a-h4,b-h4)
for run in $(seq "$RUNS"); do
    for t in bcast allreduce allgather alltoall; do
        max=4194304
        [[ $t == allgather || $t == alltoall ]] && max=524288
        for place in inter site; do
            common=(-n 8 --testbed "$bed" --hosts "${hosts[$place]}" --sites --runs 1 --max "$max" --iters 10 --json)
            "$P" bench "$t" "${common[@]}" --systems pontoon >"$OUT/$t-$place-all-$run.json"
            "$P" bench "$t" "${common[@]}" --systems pontoon -x PONTOON_COLL_HIER=0 >"$OUT/$t-$place-flat-$run.json"
            echo "round $run: $t $place done" >&2
        done
    done
done
make -s -C bench build/arrival-pontoon
for run in $(seq "$RUNS"); do
    for t in bcast allreduce allgather alltoall; do
        for place in inter site; do
            for kind in all flat; do
                flat=()
                [[ $kind == flat ]] && flat=(-x PONTOON_COLL_HIER=0)
                "$P" run -n 8 --testbed "$bed" --host "${hosts[$place]}" --sites "${flat[@]}" \
                    bench/build/arrival-pontoon "$t" 8 20 100 | awk '{ print $3 }' >>"$OUT/arrival-$t-$place-$kind"
            done
        done
    done
    echo "round $run: 8 B from a common start done" >&2
done
# MPICH and Open MPI (where installed), at their defaults: once, interleaved; a run that
# takes longer than ANCHOR_TIMEOUT seconds is left out (`pontoon bench` says so on stderr).
[[ ${ANCHORS:-1} == 0 ]] || for t in bcast allreduce allgather alltoall; do
    max=4194304
    [[ $t == allgather || $t == alltoall ]] && max=524288
    for anchor in mpich openmpi; do
        "$P" bench "$t" -n 8 --testbed "$bed" --hosts "${hosts[inter]}" --runs 1 --max "$max" --iters 10 --json \
            --systems "$anchor" --timeout "${ANCHOR_TIMEOUT:-300}" >"$OUT/$t-inter-all-$anchor.json" || true
        echo "$anchor: $t done" >&2
    done
done
python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
print("| collective | placement | size | site-aware ms | flat ms | MPICH ms | Open MPI ms | site-aware / flat | site-aware / better MPI |")
print("|---|---|---|---|---|---|---|---|---|")
for t in ["bcast", "allreduce", "allgather", "alltoall"]:
    sizes = [8, 65536, 524288 if t in ("allgather", "alltoall") else 4194304]
    for place in ["inter", "site"]:
        data = {}
        for kind in ["all", "flat"]:
            for f in glob.glob(f"{out}/{t}-{place}-{kind}-*.json"):
                try:
                    rows = json.load(open(f))["rows"]
                except (ValueError, KeyError):
                    continue  # an anchor that failed or timed out
                for r in rows:
                    for system, m in r["results"].items():
                        label = "flat" if kind == "flat" else ("site-aware" if system == "pontoon" else system)
                        data.setdefault((label, r["bytes"]), []).extend(m["runs"])
        for b in sizes:
            v = {l: data.get((l, b), []) for l in ["site-aware", "flat", "mpich", "openmpi"]}
            med = {l: statistics.median(x) / 1e3 for l, x in v.items() if x}
            cell = lambda l: f"{med[l]:.2f} ({min(v[l]) / 1e3:.2f}-{max(v[l]) / 1e3:.2f})" if l in med else "-"
            mpis = [med[l] for l in ["mpich", "openmpi"] if l in med]
            ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
            size = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1024 else f"{b} B"
            print(f"| {t} | {'interleaved' if place == 'inter' else 'by site'} | {size} | " +
                  " | ".join(cell(l) for l in ["site-aware", "flat", "mpich", "openmpi"]) +
                  f" | {ratio(med.get('site-aware'), med.get('flat'))} | {ratio(med.get('site-aware'), min(mpis) if mpis else None)} |")
PY
echo
echo "8 B from a common start to the last rank's return (bench/c/arrival.c), medians of $RUNS runs of 20 calls' medians, ms:"
echo
echo "| collective | placement | flat ms | site-aware ms | site-aware / flat |"
echo "|---|---|---|---|---|"
for t in bcast allreduce allgather alltoall; do
    for place in inter site; do
        label="$t | $([[ $place == inter ]] && echo interleaved || echo by site)"
        compare_row "$label" "$OUT/arrival-$t-$place-flat" "$OUT/arrival-$t-$place-all"
    done
done
