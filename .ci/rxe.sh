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
cargo clippy -p dmkit-rdma --features connectx --all-targets --locked -- -D warnings
cargo test -p dmkit-rdma --features connectx --locked --lib
set +e
scripts/rxe-test.sh
rc=$?
if [ "$rc" -eq 3 ]; then
    echo "ci: Soft-RoCE VM tests skipped: the VM cannot run on this machine (see above)"
    exit 0
fi
exit "$rc"
