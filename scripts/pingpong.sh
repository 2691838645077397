#!/usr/bin/env bash
# Runs examples/rc_pingpong.rs as two processes, each with its own emulated
# NIC, joined by a UDP wire on 127.0.0.1 (one Ethernet frame per datagram,
# as QEMU's -netdev dgram): ibv_rc_pingpong's exchange and output, then
# --ops (RDMA WRITE, WRITE with immediate, READ, atomics, both ways).
# Set RNIC_PCAP=DIR to capture both NICs' frames. Extra arguments go to both
# sides (e.g. -s 65536 -n 100 -m 4096).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --example rc_pingpong
bin=target/release/examples/rc_pingpong
"$bin" --wire 127.0.0.1:47001=127.0.0.1:47002 --ops "$@" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
# The client retries until the server listens.
for _ in $(seq 100); do
    if "$bin" --wire 127.0.0.1:47002=127.0.0.1:47001 --mac 02:00:00:00:00:02 \
        --ipv4 192.0.2.2 --ops "$@" 127.0.0.1 2>/tmp/rnic-pingpong-client.err; then
        wait $server
        trap - EXIT
        exit 0
    fi
    grep -q "couldn't connect" /tmp/rnic-pingpong-client.err || { cat /tmp/rnic-pingpong-client.err >&2; exit 1; }
    sleep 0.05
done
echo "pingpong: the server never listened" >&2
exit 1
