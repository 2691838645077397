#!/usr/bin/env bash
# Open MPI over rnic: Debian's Open MPI 4.1 with `--mca pml ucx`, UCX's
# verbs transports only (rc_verbs, ud_verbs), every rank a process on this
# machine with an rnic NIC that reaches every other rank's NIC, two ways:
# `fabric`, each rank's NIC in its own process on the shared-memory fabric
# (wire=fabric:DIR in /dev/shm); `rnicd`, each rank's NIC a device of one
# rnicd, reaching the others through rnicd's switch. The same benchmark
# (tests/mpi/bench.c: point-to-point latency and bandwidth, MPI_Allreduce
# with every rank checking every element) runs over Open MPI's TCP
# transport (`--mca pml ob1 --mca btl tcp,self`) in the same run, and each
# rnic figure is printed beside the TCP one with their ratio.
#
#   bash tests/mpi/run.sh [--quick] [ranks ...]     (default: 2 4)
#
# --quick: point-to-point up to 64 KiB, MPI_Allreduce up to 1 MiB, fewer
# iterations (CI). Without it: 1 B to 4 MiB and 8 B to 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
p2p=$((4 << 20))
ar=$((64 << 20))
iters=1000
if [ "${1:-}" = --quick ]; then
    shift
    p2p=65536
    ar=$((1 << 20))
    iters=200
fi
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4)
for tool in mpicc mpirun; do
    command -v "$tool" >/dev/null || {
        echo "mpi: $tool missing (scripts/setup.sh installs openmpi-bin and libopenmpi-dev)" >&2
        exit 1
    }
done
[ -c /dev/infiniband/uverbs0 ] || {
    echo "mpi: /dev/infiniband/uverbs0 missing (scripts/setup.sh makes it)" >&2
    exit 1
}
bash ibverbs/build.sh --release >/dev/null
cargo build --release -q -p rnicd
work=$(mktemp -d)
fabric=$(mktemp -d /dev/shm/rnic-mpi-fabric.XXXXXX)
rnicd_pid=
cleanup() {
    [ -z "$rnicd_pid" ] || kill "$rnicd_pid" 2>/dev/null || true
    rm -rf "$work" "$fabric"
}
trap cleanup EXIT
mpicc -O2 -Wall -Wextra -Werror -o "$work/bench" tests/mpi/bench.c
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

sock=$work/rnicd.sock
target/release/rnicd --socket "$sock" --slots 16 >"$work/rnicd.log" 2>&1 &
rnicd_pid=$!
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done

ucx=(--mca pml ucx -x LD_LIBRARY_PATH="$PWD/target/ibverbs"
    -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=rnic0:1 -x UCX_WARN_UNUSED_ENV_VARS=n)
# Every rank's NIC takes addresses of its own from its process ID.
on_fabric=("${ucx[@]}" -x RNIC_DEVICES="wire=fabric:$fabric")
on_rnicd=("${ucx[@]}" -x RNIC_DEVICES="vfio-user=$sock")
tcp=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)

# run NAME RANKS ARGS...: the benchmark's lines in $work/NAME.RANKS.
run() {
    local name=$1 n=$2
    shift 2
    local out=$work/$name.$n
    if ! timeout 900 mpirun --oversubscribe -np "$n" "$@" "$work/bench" "$p2p" "$ar" "$iters" \
        >"$out" 2>"$out.err"; then
        echo "mpi: FAILED: $n ranks over $name" >&2
        tail -20 "$out.err" >&2
        tail -5 "$out" >&2
        return 1
    fi
    if ! grep -q "^allreduce $ar " "$out"; then
        echo "mpi: $n ranks over $name printed no result for $ar B" >&2
        return 1
    fi
}

# table N: every figure of the three runs with N ranks, and each rnic one
# as a ratio to TCP's (time: less is better; bandwidth: more is better).
table() {
    local n=$1
    join -j1 <(awk '{print $1"-"$2, $3}' "$work/fabric.$n" | sort) \
        <(awk '{print $1"-"$2, $3}' "$work/rnicd.$n" | sort) |
        join -j1 - <(awk '{print $1"-"$2, $3}' "$work/tcp.$n" | sort) |
        awk '{split($1, k, "-"); order = (k[1] == "latency") ? 1 : (k[1] == "bandwidth") ? 2 : 3;
              printf "%d %s %s %s %s %s %.2f %.2f\n", order, k[1], k[2], $2, $3, $4, $2 / $4, $3 / $4}' |
        sort -k1,1n -k3,3n | cut -d' ' -f2- |
        awk 'BEGIN {printf "  %-9s %10s %12s %12s %12s %8s %8s\n", "test", "bytes", "fabric", "rnicd", "tcp", "fab/tcp", "rnicd/tcp"}
             {unit = ($1 == "bandwidth") ? "MB/s" : "us";
              printf "  %-9s %10d %9.2f %-2s %9.2f %-2s %9.2f %-2s %8.2f %8.2f\n", $1, $2, $3, unit, $4, unit, $5, unit, $6, $7}'
}

failed=0
for n in "${ranks[@]}"; do
    run fabric "$n" "${on_fabric[@]}" || failed=1
    run rnicd "$n" "${on_rnicd[@]}" || failed=1
    run tcp "$n" "${tcp[@]}" || failed=1
    [ "$failed" = 0 ] || break
    echo "== $n ranks: rnic (pml ucx, rc_verbs; NICs on the shared-memory fabric, and NICs of one rnicd) beside TCP (pml ob1, btl tcp)"
    table "$n"
done
if [ "$failed" != 0 ]; then
    exit 1
fi
echo "mpi: every rank checked every result, over rnic and over TCP"
