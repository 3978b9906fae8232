#!/usr/bin/env bash
# Installs what dmkit needs on a fresh machine. The default build (simulator, checkers,
# experiments) needs only the Rust toolchain.
#
#   scripts/setup.sh          the toolchain's components (rustfmt, clippy)
#   scripts/setup.sh --rdma   also what `--features connectx` needs: cmake and libclang to build
#                             sideway, and libibverbs, its providers and librdmacm to run it
#   scripts/setup.sh --vm     also qemu and busybox for the Soft-RoCE VM (scripts/rxe-vm.sh)
set -euo pipefail

rdma=false
vm=false
for arg in "$@"; do
    case "$arg" in
        --rdma) rdma=true ;;
        --vm) rdma=true; vm=true ;;
        *) echo "setup: unknown option '$arg' (options: --rdma, --vm)" >&2; exit 2 ;;
    esac
done

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
apt_install() {
    local missing=()
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! need apt-get; then
        echo "setup: install ${missing[*]} (no apt-get on this machine)" >&2
        exit 1
    fi
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
if $rdma; then
    # sideway builds a C shim with cmake and generates bindings with bindgen (libclang); it
    # loads libibverbs at run time, so the -dev packages are not needed.
    apt_install cmake libclang-dev libibverbs1 ibverbs-providers librdmacm1 ibverbs-utils
fi
if $vm; then
    apt_install qemu-system-x86 busybox-static iproute2
fi
# Plots are drawn by plotters with its pure-Rust backends: no system font or image library needed.
echo "setup: ok ($(cargo --version))"
