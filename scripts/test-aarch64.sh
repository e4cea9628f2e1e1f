#!/usr/bin/env bash
# The aarch64 build (Apple silicon, Graviton): lints the workspace, tests included, for
# aarch64-unknown-linux-gnu, then runs the kernel and fixture tests of `nn` and `algo`
# there, on both aarch64 kernel paths: the float64 reference checks of `neon` and
# `portable`, the PyTorch, SB3 and model fixtures on each. On an x86-64 machine it
# cross-compiles and runs them under QEMU's user-mode emulation, installing what that
# needs (as root, or with sudo): the Rust target, a cross C compiler (two TLS
# dependencies' build scripts compile C) and qemu-user. Emulation makes it correct, not
# fast: its times say nothing of an ARM CPU's speed.
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
if [ "$(uname -m)" != aarch64 ]; then
    command -v rustup >/dev/null 2>&1 || { echo "error: the aarch64 check needs rustup" >&2; exit 2; }
    # (grep reads the whole list: a pipe closed early fails under pipefail.)
    if ! rustup target list --installed | grep -x "$target" >/dev/null; then
        rustup target add "$target"
    fi
    if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo -n"; fi
        { $SUDO apt-get update -qq &&
            $SUDO apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user >/dev/null; } ||
            { echo "error: could not install gcc-aarch64-linux-gnu and qemu-user" >&2; exit 2; }
    fi
    export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
fi

cargo clippy --workspace --all-targets --target "$target" -- -D warnings
# The default path there (neon): every test of nn and algo, the path loop among them.
STRATA_KERNEL_PATH=auto cargo test --release --target "$target" -p strata-nn -p strata-algo --lib --tests
# The portable path: the fixtures again (the path loop already checked it).
STRATA_KERNEL_PATH=portable cargo test --release --target "$target" -p strata-nn -p strata-algo \
    --lib --tests -- --skip every_path --skip the_cnn_probe
echo "aarch64: linted, and nn's and algo's tests passed on neon and portable"
