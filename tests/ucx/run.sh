#!/usr/bin/env bash
# UCX over rnic's drop-in libibverbs, as a user runs it: Debian's UCX 1.13
# (ucx-utils), unmodified.
#
#   1. `ucx_info -d` lists rnic0 with UCX's verbs transports, rc_verbs and
#      ud_verbs.
#   2. `ucx_perftest`, two processes, runs UCP tag-matching latency and
#      bandwidth (8 B and 64 KiB, the eager and the rendezvous protocols)
#      over each transport, between two rnic NICs on a UDP wire, on the
#      shared-memory fabric (each process's NIC its own, in /dev/shm), and
#      between two NICs of one rnicd (shared memory and its switch).
#   3. `io_demo -q`, two processes, moves random-sized reads and writes
#      over rc_verbs with UCX's own data-integrity check, its connection
#      made by UCX's rdmacm connection manager over rnic's drop-in
#      librdmacm (docs/rdmacm.md): no TCP at all.
#
# Prints each figure; fails if a run fails, hangs or prints no result.
#
#   bash tests/ucx/run.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/../.."
iters_lat=20000
iters_bw=20000
iters_big=500
if [ "${1:-}" = --quick ]; then
    iters_lat=2000
    iters_bw=2000
    iters_big=100
fi
for tool in ucx_info ucx_perftest io_demo; do
    command -v "$tool" >/dev/null || {
        echo "ucx: $tool missing (scripts/setup.sh installs ucx-utils)" >&2
        exit 1
    }
done
[ -c /dev/infiniband/uverbs0 ] || {
    echo "ucx: /dev/infiniband/uverbs0 missing (scripts/setup.sh makes it)" >&2
    exit 1
}
bash ibverbs/build.sh --release >/dev/null
cargo build --release -q -p rnicd
export LD_LIBRARY_PATH=$PWD/target/ibverbs
work=$(mktemp -d)
fabric=$(mktemp -d /dev/shm/rnic-ucx-fabric.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work" "$fabric"
}
trap cleanup EXIT

# Ports of this run: a UDP wire's two ends, the out-of-band TCP port the
# two ucx_perftest processes meet on, and io_demo's listener (a port of its
# own: the perftests' closed connections leave theirs in TIME_WAIT, and
# UCX's listener does not reuse it).
base=$((20000 + $$ % 20000))
udp_a="wire=udp:127.0.0.1:$base=127.0.0.1:$((base + 1)),mac=02:00:00:00:00:01,ipv4=192.0.2.1"
udp_b="wire=udp:127.0.0.1:$((base + 1))=127.0.0.1:$base,mac=02:00:00:00:00:02,ipv4=192.0.2.2"
oob=$((base + 2))
io_port=$((base + 3))

echo "== ucx_info -d"
info=$(RNIC_DEVICES=$udp_a ucx_info -d)
md=$(echo "$info" | awk '/# Memory domain: rnic0/{f=1; next} /# Memory domain:/{f=0} f')
for tl in rc_verbs ud_verbs; do
    if ! echo "$md" | grep -q "Transport: $tl"; then
        echo "ucx: ucx_info -d lists no $tl on rnic0:" >&2
        echo "$info" >&2
        exit 1
    fi
done
echo "$md" | grep -E 'Transport|Device' | sed 's/^#/ /'

failed=0
# listening PORT: whether a server listens on TCP PORT within 10 s (it
# does once its UCX context is up).
listening() {
    for _ in $(seq 50); do
        sleep 0.2
        ss -ltn "sport = :$1" | grep -q LISTEN && return 0
    done
    return 1
}

# perftest TEST SIZE ITERS TLS WIRE_A WIRE_B: one server, one client.
perftest() {
    local t=$1 size=$2 n=$3 tls=$4 a=$5 b=$6
    local env=(UCX_TLS="$tls" UCX_NET_DEVICES=rnic0:1 UCX_WARN_UNUSED_ENV_VARS=n)
    RNIC_DEVICES=$a env "${env[@]}" timeout 120 ucx_perftest -t "$t" -s "$size" -n "$n" \
        -p "$oob" >"$work/server" 2>&1 &
    local server=$!
    pids+=("$server")
    local rc=0 out
    if listening "$oob"; then
        out=$(RNIC_DEVICES=$b env "${env[@]}" timeout 120 ucx_perftest 127.0.0.1 -t "$t" \
            -s "$size" -n "$n" -p "$oob" 2>&1) || rc=$?
    else
        out="the server never listened on $oob"
    fi
    wait "$server" || rc=$?
    local final
    final=$(echo "$out" | grep '^Final:' || true)
    if [ "$rc" != 0 ] || [ -z "$final" ]; then
        echo "FAILED: $t $size B over $tls (rc $rc)" >&2
        echo "$out" | tail -15 >&2
        tail -15 "$work/server" >&2
        failed=1
        return
    fi
    # Final: iterations, latency 50 %ile / average / overall (us),
    # bandwidth average / overall (MB/s), message rate average / overall.
    echo "$final" | awk -v t="$t" -v s="$size" -v tls="$tls" \
        '{printf "  %-8s %6s B  %-17s latency %8.2f us (median %8.2f)  bandwidth %9.1f MB/s  %9.0f msg/s\n", t, s, tls, $4, $3, $6, $8}'
}

for wire in udp fabric rnicd; do
    if [ "$wire" = udp ]; then
        a=$udp_a
        b=$udp_b
        echo "== ucx_perftest, two processes, NICs on a UDP wire"
    elif [ "$wire" = fabric ]; then
        # Each process's NIC has addresses of its own, from its process ID.
        a=wire=fabric:$fabric
        b=$a
        echo "== ucx_perftest, two processes, NICs on the shared-memory fabric"
    else
        sock=$work/rnicd.sock
        target/release/rnicd --socket "$sock" >"$work/rnicd.log" 2>&1 &
        pids+=($!)
        for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
        a=vfio-user=$sock
        b=$a
        echo "== ucx_perftest, two processes, NICs of one rnicd"
    fi
    for tls in rc_verbs,ud_verbs ud_verbs; do
        perftest tag_lat 8 "$iters_lat" "$tls" "$a" "$b"
        perftest tag_bw 8 "$iters_bw" "$tls" "$a" "$b"
        perftest tag_lat 65536 "$iters_big" "$tls" "$a" "$b"
        perftest tag_bw 65536 "$iters_big" "$tls" "$a" "$b"
    done
done

echo "== io_demo -q, two processes, reads and writes of 1 B to 256 KiB checked by UCX, connected through RDMA CM"
env=(UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=rnic0:1 UCX_LOG_LEVEL=debug UCX_WARN_UNUSED_ENV_VARS=n)
RNIC_DEVICES=$udp_a env "${env[@]}" timeout 120 io_demo -q -p "$io_port" -d 1:262144 \
    -o read,write >"$work/io_server" 2>&1 &
io_server=$!
pids+=("$io_server")
rc=0
# The server's UCX listens through RDMA CM on its NIC's address, which no
# socket shows: wait until its log says it listens.
for _ in $(seq 100); do
    grep -q 'started listener' "$work/io_server" && break
    sleep 0.1
done
RNIC_DEVICES=$udp_b env "${env[@]}" timeout 120 io_demo -q -p "$io_port" -d 1:262144 \
    -o read,write -i "$((iters_big * 4))" 192.0.2.1 >"$work/io_client" 2>&1 || rc=$?
kill "$io_server" 2>/dev/null || true
touch "$work/io_client"
total=$(grep -E '\[DEMO\] total' "$work/io_client" | tail -1 || true)
# The data lane the client's endpoint settled on, and the connection
# manager that connected it (UCX's debug log).
lane=$(grep -E 'lane\[[0-9]+\]:.*am_bw' "$work/io_client" | tail -1 | grep -oE '[a-z_]+/rnic0:1' || true)
cm=$(grep -oE 'created an endpoint on rdmacm' "$work/io_client" | head -1 || true)
if [ "$rc" != 0 ] || [ -z "$total" ] || [ "$lane" != rc_verbs/rnic0:1 ] || [ -z "$cm" ]; then
    echo "FAILED: io_demo (rc $rc, data lane '${lane:-none}', ${cm:-no rdmacm endpoint})" >&2
    grep -vE 'UCX +(DEBUG|TRACE)' "$work/io_client" | tail -20 >&2
    failed=1
else
    echo "  data over $lane, connected by UCX's rdmacm: $(echo "$total" | sed -E 's/.*\[DEMO\] //')"
fi

if [ "$failed" != 0 ]; then
    echo "ucx: FAILED" >&2
    exit 1
fi
echo "ucx: every run passed"
