#!/usr/bin/env bash
# Builds the OSU micro-benchmarks, unmodified, once with each MPI's own compiler wrapper —
# pontoon-cc, MPICH's mpicc.mpich and Open MPI's mpicc.openmpi where installed — through
# OSU's own configure and make, and gathers the binaries where `pontoon bench osu` runs
# them: OUT/pontoon/osu_bw, OUT/mpich/osu_bw, …
#
#   scripts/build-osu.sh OSU_SOURCE [OUT]     (OUT default: bench/build/osu)
#
# OSU_SOURCE: an unpacked osu-micro-benchmarks release (a tarball from OSU's site, or a
# checkout of it). Then, for example:
#   target/release/pontoon bench osu --osu osu_mbw_mr -n 2 --runs 5
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
src="${1:?usage: scripts/build-osu.sh OSU_SOURCE [OUT]}"
out="${2:-$here/bench/build/osu}"
[[ -x "$src/configure" ]] || { echo "build-osu: $src has no configure script (an unpacked OSU release?)" >&2; exit 1; }
src="$(cd "$src" && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

declare -A wrappers=(
    [pontoon]="$here/target/release/pontoon-cc $here/target/release/pontoon-cxx"
    [mpich]="mpicc.mpich mpicxx.mpich"
    [openmpi]="mpicc.openmpi mpicxx.openmpi"
)
for mpi in pontoon mpich openmpi; do
    read -r cc cxx <<<"${wrappers[$mpi]}"
    if ! command -v "$cc" >/dev/null; then
        echo "build-osu: $mpi: no $cc, skipped"
        continue
    fi
    work="$out/$mpi.build"
    rm -rf "$work" "${out:?}/$mpi"
    cp -r "$src" "$work"
    # A checkout has no meaningful timestamps: make must not think that configure or
    # the Makefile.in files are older than what they are made from (it would run
    # autotools, which need not be installed).
    (cd "$work" && touch aclocal.m4 && sleep 1 && touch configure && find . -name Makefile.in -exec touch {} +)
    echo "build-osu: $mpi: configure CC=$cc && make"
    (cd "$work" && ./configure CC="$cc" CXX="$cxx" >configure.log 2>&1 && make -j2 >make.log 2>&1) || {
        echo "build-osu: $mpi: the build failed; see $work/configure.log and $work/make.log" >&2
        exit 1
    }
    mkdir -p "$out/$mpi"
    find "$work" -type f -perm -u+x -name 'osu_*' ! -name '*.sh' -exec cp {} "$out/$mpi/" \;
    echo "build-osu: $mpi: $(ls "$out/$mpi" | wc -l) benchmarks in $out/$mpi"
done
