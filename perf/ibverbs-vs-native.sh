#!/usr/bin/env bash
# Unmodified perftest over the drop-in libibverbs against rnic-perf (rnic's
# own API), the same test on the same wire (two processes, a UDP wire on
# 127.0.0.1, the NIC on a device worker), alternating, three rounds each:
# what the libibverbs layer costs. Prints each round's result line.
#   bash perf/ibverbs-vs-native.sh TEST SIZE ITERS     # e.g. send_lat 8 5000
set -euo pipefail
cd "$(dirname "$0")/.."
test=$1 size=$2 iters=$3
cargo build --quiet --release -p rnic-perf
lib=$(dirname "$(bash ibverbs/build.sh --release)")
a='wire=udp:127.0.0.1:47201=127.0.0.1:47202,mac=02:00:00:00:00:01,ipv4=192.0.2.1'
b='wire=udp:127.0.0.1:47202=127.0.0.1:47201,mac=02:00:00:00:00:02,ipv4=192.0.2.2'
result() { awk -v s="$size" -v who="$1" '$1 == s { print who, $0 }'; }
for _ in 1 2 3; do
    perf=(target/release/rnic-perf "$test" --wire udp --device thread -s "$size" -n "$iters" -p 18601 --no-baselines)
    "${perf[@]}" >/dev/null 2>&1 &
    sleep 0.5
    "${perf[@]}" --client 2>&1 | result "rnic-perf"
    wait
    RNIC_DEVICES=$a LD_LIBRARY_PATH=$lib "ib_$test" -d rnic0 -s "$size" -n "$iters" -p 18602 >/dev/null 2>&1 &
    sleep 0.5
    RNIC_DEVICES=$b LD_LIBRARY_PATH=$lib "ib_$test" -d rnic0 -s "$size" -n "$iters" -p 18602 127.0.0.1 2>&1 |
        result "perftest "
    wait
done
