#!/usr/bin/env bash
# Runs inside the Soft-RoCE VM (scripts/rxe-test.sh starts it): a `dmkit memory-node` process
# and `dmkit run --backend rdma` compute processes, end to end across processes: the example
# index and Sherman, a refused wrong token, and a clean SIGTERM shutdown; then a `dmkit
# server-node` process with its diagnostic echo service, called from another process (the
# client half in rdma/tests/rxe.rs, TESTS below); HStore, its two servers as `dmkit server-node`
# processes, with writes, GETs and scans from compute processes; huge pages (a memory node
# with --hugepages serving Sherman, HStore's server nodes with --hugepages, and both refused
# while the kernel has too few free huge pages); and bad server-node input. Every index's
# history is judged: each memory-node-only index under `run --check` (crud mix, deletes
# included), the two-compute-process runs' and HStore's per-process histories together with
# `dmkit check-history`.
#
#   rxe-e2e.sh DMKIT TESTS       # TESTS: the rxe test binary
set -euo pipefail
dmkit=$1
tests=$2
# The guest's root is the host's, read-only: scratch files go to /run (a tmpfs).
scratch=/run/dmkit-e2e
mkdir -p "$scratch"
cat >"$scratch/cluster.toml" <<TOML
token = "vm-token"
device = "rxe0"
[[memory_node]]
addr = "127.0.0.1:7471"
TOML
sed 's/vm-token/wrong-token/' "$scratch/cluster.toml" >"$scratch/wrong.toml"

# start_memory_node [FLAGS...]: memory node 0 on port 7471, 256 MiB, with FLAGS.
start_memory_node() {
    "$dmkit" memory-node --listen 127.0.0.1:7471 --size 256MiB --token vm-token --device rxe0 "$@" &
    mn=$!
    for _ in $(seq 50); do
        (exec 3<>/dev/tcp/127.0.0.1/7471) 2>/dev/null && return 0
        sleep 0.2
    done
    echo "e2e: the memory node did not start"
    exit 1
}

stop_memory_node() {
    kill -TERM "$mn"
    if ! wait "$mn"; then
        echo "e2e: the memory node did not exit cleanly on SIGTERM"
        exit 1
    fi
}

run() {
    "$dmkit" run --backend rdma --cluster "$1" --index "$2" --workload a --keys 2000 \
        --compute-nodes 1 --memory-nodes 1 --threads-per-cn 2 --coroutines 4 --ops-per-client 200 --warmup-us 0 --format json
}

for index in example sherman; do
    start_memory_node
    out=$(run "$scratch/cluster.toml" "$index")
    echo "e2e: $index: $(echo "$out" | grep -o '"operations":[0-9]*\|"throughput_mops":[^,]*\|"latency_ns_p50":[0-9]*\|"remote_bytes_used":[0-9]*\|"load_factor":[^,]*' | tr '\n' ' ')"
    if ! echo "$out" | grep -q '"operations":1600'; then
        echo "e2e: $index did not complete its 1,600 operations"
        exit 1
    fi
    if echo "$out" | grep -q '"remote_bytes_used":0,'; then
        echo "e2e: $index: the invariant walk over the memory node read nothing"
        exit 1
    fi
    if echo "$out" | grep -q '"errors":{"'; then
        echo "e2e: $index reported errors"
        exit 1
    fi
    # The simulator's verb accounting is not measured on hardware: null, never a 0.
    if ! echo "$out" | grep -q '"round_trips_per_op":null' || ! echo "$out" | grep -q '"mn_iops_utilisation":null'; then
        echo "e2e: $index: verb-level metrics reported as numbers on hardware: $(echo "$out" | grep -o '"round_trips_per_op":[^,]*\|"mn_iops_utilisation":[^,]*' | tr '\n' ' ')"
        exit 1
    fi
    stop_memory_node
    echo "e2e: $index ok"
done

# Every index without server nodes, judged: the crud mix (a quarter each of search, insert,
# update and delete), every operation stamped from the cluster-wide FAA clock on memory node 0,
# and the whole history checked for linearizability (`--check`).
# judged INDEX OUTPUT STATUS: a `run --check` exited 0 and said its history is linearizable.
judged() {
    local verdict
    verdict=$(echo "$2" | grep '^history:' || true)
    echo "e2e: $1 judged on Soft-RoCE: ${verdict:-no verdict}"
    if [ "$3" -ne 0 ] || ! echo "$verdict" | grep -q ': linearizable'; then
        echo "e2e: $1: exit $3: $(echo "$2" | tail -n 12)"
        exit 1
    fi
}
for index in example sherman smart art chime race cluster dolphin probe; do
    start_memory_node
    set +e
    out=$("$dmkit" run --backend rdma --cluster "$scratch/cluster.toml" --index "$index" --workload crud --keys 1000 \
        --compute-nodes 1 --memory-nodes 1 --threads-per-cn 2 --coroutines 4 --ops-per-client 100 --warmup-us 0 \
        --check 2>&1)
    rc=$?
    set -e
    stop_memory_node
    judged "$index" "$out" "$rc"
done
echo "e2e: every index's hardware history is linearizable"

# Huge pages. This VM's kernel starts with none: --hugepages is refused in one line, exit 2,
# saying how many pages to configure.
hugepages=/proc/sys/vm/nr_hugepages
free_hugepages() { cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages; }
echo 0 >"$hugepages"
set +e
msg=$("$dmkit" memory-node --listen 127.0.0.1:7471 --size 256MiB --token vm-token --device rxe0 --hugepages 2>&1)
rc=$?
set -e
if [ "$rc" -ne 2 ] || [ "$(echo "$msg" | wc -l)" -ne 1 ] || ! echo "$msg" | grep -q "need 128 huge pages"; then
    echo "e2e: memory-node --hugepages without huge pages: exit $rc: $msg"
    exit 1
fi
echo "e2e: memory-node --hugepages without huge pages is refused (exit 2: $msg)"
# With 136 pages of 2 MiB (256 MiB needs 128), the memory node maps its memory on them and
# serves a Sherman run.
echo 136 >"$hugepages"
if [ "$(cat "$hugepages")" -lt 128 ]; then
    echo "e2e: the VM could not reserve 128 huge pages ($(cat "$hugepages"))"
    exit 1
fi
start_memory_node --hugepages 2>"$scratch/huge.log"
if [ "$(free_hugepages)" -gt 8 ]; then
    echo "e2e: memory-node --hugepages left $(free_hugepages) of 136 huge pages free (128 should be in use)"
    exit 1
fi
out=$(run "$scratch/cluster.toml" sherman)
stop_memory_node
cat "$scratch/huge.log"
echo "e2e: sherman on huge pages: $(echo "$out" | grep -o '"operations":[0-9]*\|"remote_bytes_used":[0-9]*' | tr '\n' ' ')"
if ! grep -q "268435456 bytes registered on 2 MiB huge pages" "$scratch/huge.log"; then
    echo "e2e: the memory node did not say its memory is on huge pages"
    exit 1
fi
if ! echo "$out" | grep -q '"operations":1600' || echo "$out" | grep -q '"errors":{"' \
    || echo "$out" | grep -q '"remote_bytes_used":0,'; then
    echo "e2e: sherman on a huge-page memory node: $(echo "$out" | head -c 400)"
    exit 1
fi
if [ "$(free_hugepages)" -ne 136 ]; then
    echo "e2e: the stopped memory node left $(free_hugepages) of 136 huge pages free"
    exit 1
fi
echo "e2e: a memory node on huge pages ok"

# Two compute-node processes against one memory node: node 0 loads, barriers start and end
# the measured phase together.
for cn in 0 1; do
    cp "$scratch/cluster.toml" "$scratch/cn$cn.toml"
    printf '\n[compute]\nnode = %s\n' "$cn" >>"$scratch/cn$cn.toml"
done
# two CN INDEX WORKLOAD: compute node CN's process of a two-node run.
two() {
    "$dmkit" run --backend rdma --cluster "$scratch/cn$1.toml" --index "$2" --workload "$3" --keys 3000 \
        --compute-nodes 2 --memory-nodes 1 --threads-per-cn 1 --coroutines 4 --ops-per-client 200 --warmup-us 0 \
        --export-history "$scratch/history$1.jsonl" --format json >"$scratch/out$1.json"
}
both() {
    start_memory_node
    two 0 "$1" "$2" & p0=$!
    two 1 "$1" "$2" & p1=$!
    wait $p0 && wait $p1
    stop_memory_node
    for cn in 0 1; do
        if ! grep -q '"operations":800' "$scratch/out$cn.json"; then
            echo "e2e: compute node $cn of 2 ($1, $2) did not complete its 800 operations: $(head -c 300 "$scratch/out$cn.json")"
            exit 1
        fi
    done
}
both sherman a
echo "e2e: two compute nodes ok"
# Their histories, stamped from one clock, judged together (and each alone is refused as
# incomplete by `run --check`, so only the pair is a history).
"$dmkit" check-history "$scratch/history0.jsonl" "$scratch/history1.jsonl"
both sherman crud
"$dmkit" check-history "$scratch/history0.jsonl" "$scratch/history1.jsonl"
echo "e2e: two compute processes' histories are linearizable together"
# Inserts from both processes: each takes every other fresh key number, so the table ends with
# the 3000 loaded keys and 1600 new ones (load factor 4600 / (1500 buckets x 16 slots)), where
# numbering per process would insert each fresh key twice (3800 keys, 0.158).
both example load
for cn in 0 1; do
    if ! grep -q '"load_factor":0.192' "$scratch/out$cn.json"; then
        echo "e2e: compute node $cn: inserts from two processes collided: $(grep -o '"load_factor":[0-9.]*' "$scratch/out$cn.json")"
        exit 1
    fi
done
echo "e2e: two compute nodes insert disjoint keys"

start_memory_node
set +e
msg=$(run "$scratch/wrong.toml" example 2>&1)
rc=$?
set -e
stop_memory_node
if [ "$rc" -ne 2 ] || ! echo "$msg" | grep -q "wrong cluster token"; then
    echo "e2e: a wrong token gave exit $rc: $msg"
    exit 1
fi
echo "e2e: a wrong token is refused (exit 2: $msg)"

# A server node (id 1, after the one memory node) with the diagnostic echo service: each reply
# is deferred to the service's worker, which adds the request's first word to the node's word
# at offset 0 with a local FAA. Another process calls it from 24 coroutines (more than the
# node's RPC thread and than a queue pair's call credits) and READs that word remotely.
cp "$scratch/cluster.toml" "$scratch/servers.toml"
printf '\n[[server_node]]\naddr = "127.0.0.1:7481"\n' >>"$scratch/servers.toml"
wait_port() {
    for _ in $(seq 50); do
        (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
        sleep 0.2
    done
    echo "e2e: nothing listens on port $1"
    exit 1
}
start_memory_node
"$dmkit" server-node --listen 127.0.0.1:7481 --size 64MiB --token vm-token --node 1 \
    --cluster "$scratch/servers.toml" --echo-service 7 &
sn=$!
wait_port 7481
DMKIT_SERVER_NODE=127.0.0.1:7481 DMKIT_SERVER_NODE_ID=1 DMKIT_ECHO_SERVICE=7 DMKIT_TOKEN=vm-token \
    DMKIT_RDMA_REQUIRED=1 DMKIT_RDMA_DEVICE=rxe0 "$tests" --exact a_server_node_process_answers_calls --nocapture
# A second client process finds the node's state where the first left it.
DMKIT_SERVER_NODE=127.0.0.1:7481 DMKIT_SERVER_NODE_ID=1 DMKIT_ECHO_SERVICE=7 DMKIT_TOKEN=vm-token \
    DMKIT_RDMA_REQUIRED=1 DMKIT_RDMA_DEVICE=rxe0 "$tests" --exact a_server_node_process_answers_calls >/dev/null 2>&1
# An index without services runs on a cluster file that lists a server node it never needs.
out=$(run "$scratch/servers.toml" example)
if ! echo "$out" | grep -q '"operations":1600'; then
    echo "e2e: example with a server node in the cluster file: $(echo "$out" | head -c 300)"
    exit 1
fi
kill -TERM "$sn"
if ! wait "$sn"; then
    echo "e2e: the server node did not exit cleanly on SIGTERM"
    exit 1
fi
stop_memory_node
echo "e2e: a server node answers deferred calls from other processes and stops cleanly"

# HStore: its hash-table server (HTS, node 1) and skiplist server (SLS, node 2) as two `dmkit
# server-node` processes with the compute processes' index flags, one memory node for the
# blocks. The servers start before the index exists: each probes its peer (the SLS is not up
# when the HTS starts) and then waits for the Init of the compute process that creates it. The
# HTS's workers READ keys from the memory node and ship log syncs to the SLS, whose workers
# call back with commit queries; replies are deferred to the workers; the SLS answers scans in
# pages of at most 4 KiB. The invariant walk reads the HTS's table and the memory node (it cannot
# see the SLS's skiplists on hardware).
cat >"$scratch/hstore.toml" <<TOML
token = "vm-token"
device = "rxe0"
[[memory_node]]
addr = "127.0.0.1:7471"
[[server_node]]
addr = "127.0.0.1:7481"
[[server_node]]
addr = "127.0.0.1:7482"
TOML
for cn in 0 1; do
    cp "$scratch/hstore.toml" "$scratch/hstore-cn$cn.toml"
    printf '\n[compute]\nnode = %s\n' "$cn" >>"$scratch/hstore-cn$cn.toml"
done
# hstore CONFIG WORKLOAD COMPUTE_NODES OPS_PER_CLIENT: one HStore deployment, COMPUTE_NODES
# compute processes of two threads of two coroutines each, then every process stopped. The
# server nodes' memory is on huge pages (--hugepages, through the --index path).
hstore() {
    local config=$1 workload=$2 cns=$3 ops=$4
    local flags=(--index hstore --config "$config" --workload "$workload" --keys 300 --compute-nodes "$cns"
        --threads-per-cn 2 --coroutines 2)
    start_memory_node
    local servers=()
    for node in 1 2; do
        "$dmkit" server-node --listen 127.0.0.1:748$node --size 16MiB --token vm-token --node $node \
            --hugepages --cluster "$scratch/hstore.toml" "${flags[@]}" 2>"$scratch/server$node.log" &
        servers+=($!)
        wait_port 748$node
    done
    local runs=()
    for cn in $(seq 0 $((cns - 1))); do
        "$dmkit" run --backend rdma --cluster "$scratch/hstore-cn$cn.toml" "${flags[@]}" --memory-nodes 1 \
            --ops-per-client "$ops" --warmup-us 0 --export-history "$scratch/hstore-history$cn.jsonl" \
            --format json >"$scratch/hstore$cn.json" 2>"$scratch/hstore$cn.log" &
        runs+=($!)
    done
    local failed=0
    for p in "${runs[@]}"; do
        wait "$p" || failed=1
    done
    for p in "${servers[@]}"; do
        kill -TERM "$p"
        wait "$p" || failed=1
    done
    stop_memory_node
    for node in 1 2; do
        if ! grep -q "16777216 bytes registered on 2 MiB huge pages" "$scratch/server$node.log"; then
            echo "e2e: hstore: server node $node is not on huge pages: $(head -c 300 "$scratch/server$node.log")"
            failed=1
        fi
    done
    if [ $failed -ne 0 ]; then
        echo "e2e: hstore $config $workload: a process failed"
        tail -n 5 "$scratch"/hstore*.log "$scratch"/server*.log "$scratch"/hstore*.json
        exit 1
    fi
    local want=$((ops * 4))
    local histories=()
    for cn in $(seq 0 $((cns - 1))); do
        local out
        out=$(cat "$scratch/hstore$cn.json")
        echo "e2e: hstore $config $workload, compute node $cn: $(echo "$out" | grep -o '"operations":[0-9]*\|"remote_bytes_used":[0-9]*\|"lease_restart":[0-9]*\|"scan_rpc":[0-9]*\|"batch_shared":[0-9]*' | tr '\n' ' ')"
        if ! echo "$out" | grep -q "\"operations\":$want,"; then
            echo "e2e: hstore $config $workload: compute node $cn did not complete its $want operations: $(head -c 400 "$scratch/hstore$cn.json")"
            exit 1
        fi
        if echo "$out" | grep -q '"errors":{"'; then
            echo "e2e: hstore $config $workload: compute node $cn reported errors: $(echo "$out" | grep -o '"errors":{[^}]*}')"
            exit 1
        fi
        if echo "$out" | grep -q '"remote_bytes_used":0,'; then
            echo "e2e: hstore $config $workload: the invariant walk read nothing"
            exit 1
        fi
        histories+=("$scratch/hstore-history$cn.jsonl")
        for op in "${@:5}"; do
            if ! echo "$out" | grep -q "\"$op\":{\"operations\":[1-9]"; then
                echo "e2e: hstore $config $workload: compute node $cn ran no $op"
                exit 1
            fi
        done
    done
    local verdict
    if ! verdict=$("$dmkit" check-history "${histories[@]}"); then
        echo "e2e: hstore $config $workload: the history is not clean: $verdict"
        exit 1
    fi
    echo "e2e: hstore $config $workload: $(echo "$verdict" | head -n 1)"
}
# Two server nodes of 16 MiB: 16 huge pages.
echo 16 >"$hugepages"
# Writes (through the HTS's log and the SLS) and one-sided GETs, from two compute processes,
# in the default protocol (commit points, exactly-once retries, the read lease).
hstore hstore a 2 25 search update
# Scans in the default protocol: the read lease (50 ms) must outlast a scan's SLS call and
# READs, which take milliseconds in this VM.
hstore hstore e 1 10 scan
# And in the paper's protocol (the load's inserts' log-sync acks deferred to the SLS's workers).
hstore faithful-sync e 1 10 scan
echo "e2e: HStore's two server-node processes serve writes, GETs and scans from compute processes"

# Clover: its metadata server as a `dmkit server-node` process (node 1), the crud mix judged.
clover=(--index clover --workload crud --keys 1000 --compute-nodes 1 --threads-per-cn 2 --coroutines 4)
start_memory_node
"$dmkit" server-node --listen 127.0.0.1:7481 --size 64MiB --token vm-token --node 1 \
    --cluster "$scratch/servers.toml" "${clover[@]}" &
sn=$!
wait_port 7481
set +e
out=$("$dmkit" run --backend rdma --cluster "$scratch/servers.toml" "${clover[@]}" --memory-nodes 1 \
    --ops-per-client 100 --warmup-us 0 --check 2>&1)
rc=$?
set -e
kill -TERM "$sn"
wait "$sn"
stop_memory_node
judged clover "$out" "$rc"

# Bad input is one line and exit 2 (huge pages: none are left configured).
echo 0 >"$hugepages"
expect_refusal() {
    set +e
    msg=$("$dmkit" server-node --listen 127.0.0.1:7482 --token vm-token "$@" 2>&1)
    rc=$?
    set -e
    if [ "$rc" -ne 2 ] || [ "$(echo "$msg" | wc -l)" -ne 1 ]; then
        echo "e2e: server-node $*: exit $rc: $msg"
        exit 1
    fi
    echo "e2e: server-node $*: $msg"
}
expect_refusal --size 64MiB --node 1 --device nosuch
expect_refusal --size 0 --node 1
expect_refusal --size 64MiB --node 0 --cluster "$scratch/servers.toml"
expect_refusal --size 64MiB --node 1 --cluster "$scratch/servers.toml" --index sherman
# HStore's two servers call each other: a cluster file must list both.
expect_refusal --size 64MiB --node 1 --cluster "$scratch/servers.toml" --index hstore
expect_refusal --size 64MiB --node 1 --hugepages
expect_refusal --size 16MiB --node 1 --cluster "$scratch/hstore.toml" --index hstore --keys 300 --hugepages
echo "e2e: all passed"
