#!/usr/bin/env bash
# The aarch64 build (Apple silicon, Graviton) on an x86-64 machine: lints the workspace,
# tests included, for aarch64-unknown-linux-gnu, then runs the kernel and fixture tests
# of `nn` and `algo` there under QEMU's user-mode emulation: the float64 reference
# checks of the `neon` and `portable` paths, the PyTorch and SB3 fixtures on `neon`.
# Installs what it needs (as root, or with sudo): the Rust target, a cross C compiler
# (two TLS dependencies' build scripts compile C) and qemu-user. Emulation makes it
# correct, not fast: its times say nothing of an ARM CPU's speed.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v rustup >/dev/null 2>&1 || { echo "error: the aarch64 check needs rustup" >&2; exit 2; }
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
    rustup target add aarch64-unknown-linux-gnu
if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    { $SUDO apt-get update -qq &&
        $SUDO apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user >/dev/null; } ||
        { echo "error: could not install gcc-aarch64-linux-gnu and qemu-user" >&2; exit 2; }
fi
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
# The path is aarch64's own (neon), whatever this machine's shell asked for.
unset STRATA_KERNEL_PATH

cargo clippy --workspace --all-targets --target aarch64-unknown-linux-gnu -- -D warnings
cargo test --release --target aarch64-unknown-linux-gnu -p strata-nn -p strata-algo --lib --tests
echo "aarch64: linted, and nn's and algo's tests passed under emulation"
