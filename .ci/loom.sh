#!/usr/bin/env bash
# loom: model-checks the compute-node structures of dmkit-indexes (DESIGN §4). `--cfg loom`
# swaps `indexes/src/common/primitive.rs` to loom's types; a separate target directory keeps the
# normal build's artifacts valid.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=(cargo test -p dmkit-indexes --test loom_chunk --test loom_example --test loom_hocl --test loom_rdwc --test loom_root --release)
echo "+ RUSTFLAGS=\"--cfg loom\" CARGO_TARGET_DIR=$PWD/target/loom ${cmd[*]}"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$PWD/target/loom" "${cmd[@]}"
