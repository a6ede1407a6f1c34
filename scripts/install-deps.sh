#!/usr/bin/env bash
# Installs what building and testing pontoon needs, on Debian 12. Idempotent: it only
# installs what is missing (and runs `apt-get update` only when something is), so it is
# cheap to run before every build. System packages need root; as another user it says
# what is missing and goes on with the Rust part.
#
#   scripts/install-deps.sh [--anchors] [--no-fuzz]
#
# Always: PyPI's `mpich` (5.x) in a virtual environment at $PONTOON_MPICH_ABI (default
# ~/.local/share/pontoon/mpich-abi): its mpi_abi.h is the reference the C ABI tests
# compare mpi.h with, and its mpicc_abi builds the binaries that must run on pontoon.
#
#   --anchors   also the comparison anchors: Open MPI, MPICH, iperf3, sockperf (large)
#   --no-fuzz   skip cargo-fuzz (needed only by scripts/fuzz-smoke.sh)
set -euo pipefail

BASE_PKGS=(build-essential pkg-config iproute2 nftables ethtool util-linux procps psmisc python3-venv
           slurmd slurmctld slurm-client munge)
ANCHOR_PKGS=(openmpi-bin libopenmpi-dev mpich libmpich-dev iperf3 sockperf iputils-ping)
MIN_RUST="1.82.0"        # keep in step with rust-version in Cargo.toml
CARGO_FUZZ_VERSION="^0.13"

log() { printf 'install-deps: %s\n' "$*"; }
warn() { printf 'install-deps: warning: %s\n' "$*" >&2; }
die() {
    printf 'install-deps: error: %s\n' "$*" >&2
    exit 1
}

anchors=0
fuzz=1
for arg in "$@"; do
    case "$arg" in
        --anchors) anchors=1 ;;
        --no-fuzz) fuzz=0 ;;
        -h | --help)
            sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument '$arg' (see --help)" ;;
    esac
done

# ---- system packages ----------------------------------------------------------------

pkgs=("${BASE_PKGS[@]}")
if [[ $anchors -eq 1 ]]; then
    pkgs+=("${ANCHOR_PKGS[@]}")
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    warn "not a Debian system (no dpkg/apt): make sure the equivalents of these are installed: ${pkgs[*]}"
else
    missing=()
    for p in "${pkgs[@]}"; do
        if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)" != "ii "* ]]; then
            missing+=("$p")
        fi
    done
    if [[ ${#missing[@]} -eq 0 ]]; then
        log "system packages present: ${pkgs[*]}"
    elif [[ "$(id -u)" -ne 0 ]]; then
        warn "not root, so not installing system packages; missing: ${missing[*]}"
        warn "as root run: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
    else
        log "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q || die "apt-get update failed"
        apt-get install -y -q --no-install-recommends "${missing[@]}" || die "apt-get install failed"
    fi
fi
if [[ $anchors -eq 0 ]]; then
    log "comparison anchors (${ANCHOR_PKGS[*]}) not requested (--anchors)"
fi

# ---- Rust toolchain -----------------------------------------------------------------

export PATH="$HOME/.cargo/bin:$PATH"

if ! command -v cargo >/dev/null 2>&1; then
    if command -v rustup >/dev/null 2>&1; then
        log "cargo not found; installing the stable toolchain with rustup"
        rustup toolchain install stable --profile minimal -c rustfmt,clippy \
            || die "rustup could not install the stable toolchain (offline?): install Rust >= $MIN_RUST by hand"
        rustup default stable >/dev/null
    else
        command -v curl >/dev/null 2>&1 \
            || die "no cargo, no rustup and no curl: install Rust >= $MIN_RUST (https://rustup.rs) and re-run"
        tmp="$(mktemp)"
        trap 'rm -f "$tmp"' EXIT
        if curl --proto '=https' --tlsv1.2 -fsS --max-time 30 https://sh.rustup.rs -o "$tmp"; then
            log "cargo not found; installing Rust with rustup into $HOME/.cargo"
            sh "$tmp" -y --no-modify-path --profile minimal --default-toolchain stable -c rustfmt,clippy \
                || die "the rustup installer failed: install Rust >= $MIN_RUST by hand and re-run"
        else
            die "no cargo here and rustup's installer is unreachable: install Rust >= $MIN_RUST" \
                "with rustfmt and clippy (Debian's own rustc is too old), then re-run"
        fi
    fi
fi

rust_version="$(rustc --version | awk '{print $2}')"
if [[ "$(printf '%s\n%s\n' "$MIN_RUST" "${rust_version%%-*}" | sort -V | head -n 1)" != "$MIN_RUST" ]]; then
    die "rustc $rust_version is older than the $MIN_RUST pontoon needs (rustup update stable)"
fi
for component in rustfmt clippy; do
    sub=$([[ $component == rustfmt ]] && echo fmt || echo clippy)
    if ! cargo "$sub" --version >/dev/null 2>&1; then
        command -v rustup >/dev/null 2>&1 \
            || die "cargo $sub is missing and there is no rustup to add $component: install it by hand"
        log "adding the $component component"
        rustup component add "$component" || die "rustup could not add $component"
    fi
done
log "rust: $(rustc --version)"

# ---- the standard-ABI reference: PyPI mpich ----------------------------------------

MPICH_ABI="${PONTOON_MPICH_ABI:-$HOME/.local/share/pontoon/mpich-abi}"
MPICH_PYPI_VERSION=">=5,<6"
if [[ -x "$MPICH_ABI/bin/mpicc_abi" && -f "$MPICH_ABI/include/mpi_abi.h" ]]; then
    log "standard-ABI reference: $MPICH_ABI (PyPI mpich)"
else
    log "installing PyPI mpich $MPICH_PYPI_VERSION into $MPICH_ABI (the standard-ABI reference)"
    python3 -m venv "$MPICH_ABI" || die "python3 -m venv failed (install python3-venv)"
    "$MPICH_ABI/bin/pip" install -q "mpich$MPICH_PYPI_VERSION" \
        || die "pip could not install mpich into $MPICH_ABI (offline? the C ABI tests need it)"
    [[ -x "$MPICH_ABI/bin/mpicc_abi" ]] || die "PyPI mpich installed but has no mpicc_abi"
    log "standard-ABI reference: $MPICH_ABI"
fi

# ---- fuzzing (optional) -------------------------------------------------------------

if [[ $fuzz -eq 1 ]]; then
    if cargo fuzz --version >/dev/null 2>&1; then
        log "fuzz: $(cargo fuzz --version)"
    else
        log "installing cargo-fuzz $CARGO_FUZZ_VERSION with cargo install (about a minute)"
        if cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION" --quiet; then
            log "fuzz: $(cargo fuzz --version)"
        else
            warn "could not install cargo-fuzz: the fuzz smoke test will be skipped"
        fi
    fi
fi
log "done"
