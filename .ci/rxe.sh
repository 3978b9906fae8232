#!/usr/bin/env bash
# The real backend (feature `connectx`): lints, then its integration tests on Soft-RoCE inside
# a qemu VM (scripts/rxe-test.sh) when this machine can install qemu, rdma-core and Debian's
# kernel package; otherwise it says it skipped them, and why.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! log=$(scripts/setup.sh --vm 2>&1); then
    echo "ci: real-backend checks skipped: the packages could not be installed:"
    echo "$log" | tail -3
    exit 0
fi
set -e
cargo clippy -p dmkit-rdma -p dmkit-experiments --features connectx --all-targets --locked -- -D warnings
# Native masked atomics (mlx5 direct verbs): no ConnectX here, so they are built and linted,
# their WQE layout unit-tested, and the rest of their queue-pair path run on Soft-RoCE by
# scripts/rxe-test.sh.
cargo clippy -p dmkit-rdma -p dmkit-experiments --features mlx5-masked --all-targets --locked -- -D warnings
cargo build --features mlx5-masked --bin dmkit --locked
cargo test -p dmkit-rdma --features connectx --locked --lib
cargo test -p dmkit-rdma --features mlx5-masked --locked --lib
set +e
scripts/rxe-test.sh
rc=$?
if [ "$rc" -eq 3 ]; then
    echo "ci: Soft-RoCE VM tests skipped: the VM cannot run on this machine (see above)"
    exit 0
fi
exit "$rc"
