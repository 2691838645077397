#!/usr/bin/env bash
# The ping-pong figures of docs/performance.md, in one run: for 64 B,
# 4 KiB and 64 KiB messages, two processes on 127.0.0.1 exchanging them
# back and forth,
#   - rdma:  examples/rc_pingpong, each process with its emulated NIC on a
#            UDP wire (what scripts/pingpong.sh runs);
#   - ibv:   Debian's unmodified ibv_rc_pingpong over rnic's drop-in
#            libibverbs.so.1 (release build), the same wire;
#   - tcp:   the same exchanges over a TCP connection between the same two
#            processes (rc_pingpong --tcp): the OS network stack;
# each the median of RUNS runs (default 5) of the client's figure, as the
# libibverbs examples print it (usec/iter and Mbit/s), and each RDMA figure
# beside TCP's. Extra arguments go to every run (e.g. -m 4096).
#
#   bash perf/pingpong.sh > pingpong.txt
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
cargo build --release -q --example rc_pingpong
lib=$(dirname "$(bash ibverbs/build.sh --release)")
ex=target/release/examples/rc_pingpong
A='wire=udp:127.0.0.1:47101=127.0.0.1:47102,mac=02:00:00:00:00:01,ipv4=192.0.2.1'
B='wire=udp:127.0.0.1:47102=127.0.0.1:47101,mac=02:00:00:00:00:02,ipv4=192.0.2.2'

# One run of KIND at SIZE for ITERS: the client's usec/iter.
one() {
    local kind=$1 size=$2 iters=$3
    shift 3
    local srv cli
    case $kind in
    rdma | tcp)
        local t=()
        [ "$kind" = tcp ] && t=(--tcp)
        srv=("$ex" --wire 127.0.0.1:47001=127.0.0.1:47002 -s "$size" -n "$iters" "${t[@]}" "$@")
        cli=("$ex" --wire 127.0.0.1:47002=127.0.0.1:47001 --mac 02:00:00:00:00:02
            --ipv4 192.0.2.2 -s "$size" -n "$iters" "${t[@]}" "$@" 127.0.0.1)
        "${srv[@]}" >/dev/null 2>&1 &
        ;;
    ibv)
        RNIC_DEVICES=$A LD_LIBRARY_PATH=$lib ibv_rc_pingpong -d rnic0 -g 0 \
            -s "$size" -n "$iters" "$@" >/dev/null 2>&1 &
        cli=(env RNIC_DEVICES="$B" LD_LIBRARY_PATH="$lib" ibv_rc_pingpong -d rnic0 -g 0
            -s "$size" -n "$iters" "$@" 127.0.0.1)
        ;;
    esac
    local out=""
    for _ in $(seq 100); do
        if out=$("${cli[@]}" 2>/dev/null); then
            break
        fi
        sleep 0.05
    done
    wait
    echo "$out" | sed -n 's/.* = \([0-9.]*\) usec\/iter/\1/p'
}

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

nproc
lscpu | grep -E "Model name" || true
printf '%-6s %8s  %-5s %12s %12s %10s\n' size iters kind usec/iter Mbit/s "vs tcp"
for size in 64 4096 65536; do
    case $size in
    64) iters=20000 ;;
    4096) iters=5000 ;;
    *) iters=2000 ;;
    esac
    declare -A us
    for kind in tcp rdma ibv; do
        us[$kind]=$(for _ in $(seq "$runs"); do one "$kind" "$size" "$iters" "$@"; done | median)
    done
    for kind in tcp rdma ibv; do
        awk -v s="$size" -v n="$iters" -v k="$kind" -v u="${us[$kind]}" -v t="${us[tcp]}" \
            'BEGIN { printf "%-6d %8d  %-5s %12.2f %12.2f %9.2fx\n", s, n, k, u, s * 16 / u, t / u }'
    done
done
