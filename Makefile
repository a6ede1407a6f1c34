# pontoon — top-level entry points. The README's quickstart is `make demo` and `make test`;
# CI runs `make test` (through .ci/run). `make help` lists the rest.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
export PATH := $(HOME)/.cargo/bin:$(PATH)

CARGO        ?= cargo
# Seconds each fuzz target runs in `make test` and `make fuzz-smoke` (the script alone: 20).
FUZZ_SECONDS ?= 10
# The cargo profile `make test` builds and tests in (Cargo.toml).
TEST_PROFILE ?= ci
# Ranks `make demo` starts on this host (shared memory between them).
NP           ?= 4

step = @printf '\n==== [%s] %s ====\n' "$$(date +%T)" '$(1)'

.DEFAULT_GOAL := help
.PHONY: help test demo deps fmt fmt-check clippy race-check build build-tests test-rust bench fuzz-smoke fuzz-smoke-if-available clean

help:
	@echo "make demo        build (release); as root 8 ranks across the two-clusters testbed (relays on the heads), then 2 ms apart (punched pairs), a NIC failover, a raw-Ethernet lane beside TCP, encrypted WAN streams between two sites 50 ms apart and seed 004's experiment in short; then $(NP) local ranks over shared memory (eight threads each at MPI_THREAD_MULTIPLE, a progress thread moving a send while its rank is away), 128 connecting every pair and 256 in a first alltoall"
	@echo "make test        everything CI checks: deps, fmt, clippy, build, bench/, fuzz smoke, tests"
	@echo "make deps        scripts/install-deps.sh (system packages need root; --anchors for MPIs)"
	@echo "make fmt         format the workspace"
	@echo "make fmt-check | clippy | race-check | build-tests | test-rust | bench | fuzz-smoke   single steps of 'make test'"
	@echo "make build       the release build (target/release: pontoon, pontoon-cc, libmpi_abi.so, examples)"
	@echo "make clean       remove build outputs (target/, bench/build/, fuzz/target/)"

# Each step is its own sub-make so that the order holds even under `make -j`. The cargo
# tests run last: their summary lines close the output.
test:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory fmt-check
	@$(MAKE) --no-print-directory clippy
	@$(MAKE) --no-print-directory race-check
	@$(MAKE) --no-print-directory build-tests
	@$(MAKE) --no-print-directory bench
	@$(MAKE) --no-print-directory fuzz-smoke-if-available
	@$(MAKE) --no-print-directory test-rust

deps:
	$(call step,install dependencies: scripts/install-deps.sh)
	@scripts/install-deps.sh

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(call step,format: cargo fmt --all -- --check)
	$(CARGO) fmt --all -- --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check

clippy:
	$(call step,lint: cargo clippy --workspace --all-targets -- -D warnings)
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Loom's model check of the lock and the sleepers that a rank's threads share
# (crates/futex/tests/model.rs): its own target directory, as --cfg loom rebuilds the crate.
race-check:
	$(call step,thread-race check: loom on crates/futex (every interleaving of the locking core))
	RUSTFLAGS="--cfg loom" $(CARGO) clippy -p pontoon-futex --all-targets --release --target-dir target/loom -- -D warnings
	RUSTFLAGS="--cfg loom" $(CARGO) test -p pontoon-futex --release --target-dir target/loom

build:
	$(call step,build: cargo build --release --workspace --lib --bins --examples)
	$(CARGO) build --release --workspace --lib --bins --examples

# What `make test` builds: all targets at once, tests among them, so that the features are
# resolved with the dev-dependencies as `cargo test` resolves them (a plain `cargo build`
# resolves them without, and every crate was built twice), and the C library too. The `ci`
# profile is release without its LTO (Cargo.toml).
build-tests:
	$(call step,build: cargo build --profile $(TEST_PROFILE) --workspace --all-targets)
	$(CARGO) build --profile $(TEST_PROFILE) --workspace --all-targets

# Optimised: the multi-process tests are timing-sensitive.
test-rust:
	$(call step,tests: cargo test --profile $(TEST_PROFILE) --workspace)
	$(CARGO) test --profile $(TEST_PROFILE) --workspace

bench:
	$(call step,C benchmarks: make -C bench)
	$(MAKE) --no-print-directory -C bench

fuzz-smoke:
	$(call step,fuzz smoke: scripts/fuzz-smoke.sh $(FUZZ_SECONDS) (seconds per target))
	scripts/fuzz-smoke.sh $(FUZZ_SECONDS)

# As fuzz-smoke, but skipped with a message where cargo-fuzz cannot be had.
fuzz-smoke-if-available:
	@if scripts/fuzz-smoke.sh --check 2>/dev/null; then \
		$(MAKE) --no-print-directory fuzz-smoke; \
	else \
		printf '\n==== fuzz smoke SKIPPED: the fuzz tooling is not usable here ====\n'; \
		scripts/fuzz-smoke.sh --check || true; \
	fi

demo:
	@scripts/install-deps.sh --no-fuzz
	@$(MAKE) --no-print-directory build
	$(call step,demo: scripts/demo.sh (as root: 8 ranks across the two-clusters testbed))
	@scripts/demo.sh $(NP)

clean:
	$(CARGO) clean
	$(MAKE) --no-print-directory -C bench clean
	rm -rf fuzz/target
