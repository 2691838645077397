#!/bin/bash
# Every rnic-perf figure of docs/performance.md, in one run: each line of
# output beside the baselines measured in the same run. Builds the release
# binary first. Takes about five minutes on the 2-core CI machine.
#
#   bash perf/figures.sh > figures.txt
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p rnic-perf
P=target/release/rnic-perf
run() { echo "== rnic-perf $*"; "$P" "$@" 2>&1 | grep -v "^rnic-perf: " || true; }
# Two processes: the server first, then the client, which prints.
pair() {
    local port=$1
    shift
    echo "== rnic-perf $* (server, then --client)"
    "$P" "$@" -p "$port" >/dev/null 2>&1 &
    sleep 0.5
    "$P" "$@" -p "$port" --client 2>&1 | grep -v "^rnic-perf: " || true
    wait
}
nproc
lscpu | grep -E "Model name|Thread|Core|Socket" || true
# Latency, in process.
run write_lat -n 100000
run write_lat -n 100000 --device thread
run write_lat -n 100000 --wire switch
run write_lat -n 100000 --wire switch --device thread
run read_lat -n 100000
run atomic_lat -n 100000
run send_lat -n 100000
# Message rate and bandwidth, in process.
run write_bw -n 2000000 -t 256 -c 64
run write_bw -n 2000000 -t 256 -c 64 --device thread
run write_bw -n 2000000 -t 256 -c 64 --wire switch
run write_bw -n 2000000 -t 256 -c 64 --wire switch --device thread
run write_bw -s 65536 -n 50000
run write_bw -s 65536 -n 50000 --device thread
# 4096 QPs against one.
run write_bw -n 1000000 -q 1 -t 16 -c 8
run write_bw -n 1000000 -q 4096 -t 16 -c 8
# 5 % loss against none.
run write_bw -n 1000000 -t 256 -c 64 -u 1
run write_bw -n 1000000 -t 256 -c 64 -u 1 --loss 0.05
run write_bw -n 1000000 -t 64 -c 16 -u 1
run write_bw -n 1000000 -t 64 -c 16 -u 1 --loss 0.05
run write_bw -n 300000 -t 256 -c 64 --loss 0.05
run write_bw -s 65536 -n 20000 -u 1
run write_bw -s 65536 -n 20000 -u 1 --loss 0.05
# Two processes.
pair 18600 write_lat -n 100000 --wire shm
pair 18610 write_lat -n 100000 --wire udp
pair 18620 write_bw -n 2000000 -t 256 --wire shm
pair 18630 write_lat -n 30000 --wire shm --device thread
pair 18640 write_lat -n 30000 --wire udp --device thread
# CPU per message.
run write_lat -n 100000 --cpu-util
run write_bw -n 1000000 -t 256 --cpu-util
# Unmodified perftest through rnicd, two processes, one device worker.
bash perf/rnicd.sh
# The plots of docs/.
run write_lat -a -n 3000 --plot docs/perf-write-lat.svg
run write_bw -a -n 2000 --plot docs/perf-write-bw.svg
