#!/usr/bin/env bash
# Installs what dmkit needs on a fresh machine. The default build (simulator, checkers,
# experiments) needs only the Rust toolchain; the real RDMA backend's extra packages are
# installed by `scripts/setup.sh --rdma` (added with the backend).
set -euo pipefail

need() { command -v "$1" >/dev/null 2>&1; }

if ! need cargo; then
    echo "setup: cargo not found; install a Rust toolchain (rustup) first" >&2
    exit 1
fi
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        if need rustup; then
            rustup component add "$component"
        else
            echo "setup: cargo $component is missing and rustup is not available" >&2
            exit 1
        fi
    fi
done
# Plots are drawn by plotters with its pure-Rust backends: no system font or image library needed.
echo "setup: ok ($(cargo --version))"
