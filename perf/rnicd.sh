#!/bin/bash
# Unmodified perftest through rnicd: two processes, each a client of one
# rnicd (RNIC_DEVICES=vfio-user=...), beside the baselines of the same run
# (TCP over loopback and one core's memcpy, as rnic-perf measures them).
# Builds rnicd, rnic-perf and the drop-in libibverbs in release first.
#
#   bash perf/rnicd.sh > rnicd.txt
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p rnicd -p rnic-perf
bash ibverbs/build.sh --release >/dev/null
sock=$(mktemp -u /tmp/rnicd-perf.XXXXXX.sock)
target/release/rnicd --socket "$sock" &
rnicd=$!
trap 'kill $rnicd 2>/dev/null; rm -f "$sock"' EXIT
while [ ! -S "$sock" ]; do sleep 0.05; done
export RNIC_DEVICES="vfio-user=$sock" LD_LIBRARY_PATH=target/ibverbs
port=18700
# A perftest pair: the server, then the client, which prints its results.
pt() {
    port=$((port + 1))
    echo "== $* (two processes through rnicd)"
    "$@" -d rnic0 -x 0 -p "$port" >/dev/null 2>&1 &
    local server=$!
    sleep 1
    "$@" -d rnic0 -x 0 -p "$port" 127.0.0.1 2>&1 | grep -E "^ *[0-9]|#bytes|CPU" || true
    wait "$server" || true
}
nproc
lscpu | grep -E "Model name" || true
echo "== baselines (rnic-perf, same run)"
target/release/rnic-perf write_lat -s 8 -n 2000 2>&1 | grep -E "TCP|cache-line ping-pong" || true
target/release/rnic-perf write_bw -s 65536 -n 2000 2>&1 | grep -E "TCP|memcpy" || true
pt ib_write_lat -s 8 -n 100000
pt ib_send_lat -s 8 -n 100000
pt ib_read_lat -s 8 -n 100000
pt ib_write_bw -s 8 -n 1000000
pt ib_write_bw -s 65536 -D 5
pt ib_write_bw -s 65536 -D 5 --cpu_util
pt ib_read_bw -s 65536 -D 5
pt ib_send_bw -s 65536 -D 5
