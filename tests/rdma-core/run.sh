#!/usr/bin/env bash
# rdma-core's own test suite (v44's pyverbs tests, ../shared/rdma-core-tests)
# over rnic's drop-in libibverbs, run as rdma-core runs it against a
# device: Debian's python3-pyverbs, unmodified tests. Twice: one device on
# the default loopback wire, and one on a point-to-point UDP wire, whose
# NIC loops its own QPs' traffic back itself.
#
# Fails if a test fails, errors or hangs, if anything is printed besides
# the tests' own lines (teardown errors such as "Failed to dealloc PD"),
# or if a test skips for a reason not listed below: a skip must be the
# device honestly reporting a capability rnic lacks, or the machine
# lacking something the test needs.
#
#   bash tests/rdma-core/run.sh [path to rdma-core-tests]
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:-../shared/rdma-core-tests}
if [ ! -f "$src/tests/run_tests.py" ]; then
    echo "rdma-core tests: no suite at $src (the team's shared/ folder beside the checkout)" >&2
    exit 1
fi
python=/usr/bin/python3
if ! "$python" -c 'import pyverbs' 2>/dev/null; then
    echo "rdma-core tests: $python has no pyverbs (scripts/setup.sh installs python3-pyverbs)" >&2
    exit 1
fi
bash ibverbs/build.sh --release >/dev/null
lib=$PWD/target/ibverbs

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The shared copy is read-only; Python writes its caches beside the tests.
cp -r "$src/tests" "$work/tests"
chmod -R u+w "$work/tests"

# Why a test may skip: capabilities rnic does not have (each reported by
# the device: no ODP, device memory, XRC, raw packet QPs, parent domains,
# CQ timestamps or tag matching, atomic write, device import), another
# vendor's device, RDMA CM (not served yet), or what the machine lacks.
allowed='non MLX5 device|non EFA device|not an MLX5 device|ODP is not supported|Device memory is not supported|Create XRCD is not supported|Create QP type 8 is not supported|Raw Packet QP .* is not supported|Parent Domain is not supported|Extended CQ is not supported|Create Extended CQ is not supported|Query device real time is not supported|Extended QP is not supported on this device|Importing a device is not supported|doesn.t have net interface|Allocating dmabuf is not supported|no huge pages of size|cuda-python|PCI device must be passed'

run() {
    local what=$1 devices=$2
    local log=$work/$what.log
    local rc=0
    local env=(env -u RNIC_DEVICES -u RNIC_DEVICES_FILE LD_LIBRARY_PATH="$lib")
    [ -z "$devices" ] || env+=(RNIC_DEVICES="$devices")
    (cd "$work/tests" && "${env[@]}" timeout 900 "$python" run_tests.py -v >"$log" 2>&1) || rc=$?
    local ran passed skipped failed
    ran=$(sed -nE 's/^Ran ([0-9]+) tests? .*/\1/p' "$log")
    skipped=$(grep -cE '\.\.\. skipped ' "$log" || true)
    failed=$(grep -cE '^(ERROR|FAIL|UNEXPECTED SUCCESS): ' "$log" || true)
    passed=$((${ran:-0} - skipped - failed))
    echo "rdma-core tests, $what: $passed passed, $failed failed, $skipped skipped"
    if [ "$rc" = 124 ]; then
        echo "rdma-core tests, $what: hung (killed after 900 s) in:" >&2
        tail -3 "$log" >&2
        return 1
    fi
    local bad=0
    if [ "$rc" != 0 ] || [ "$failed" != 0 ] || ! tail -1 "$log" | grep -q '^OK'; then
        grep -E '^(ERROR|FAIL):' "$log" >&2 || true
        bad=1
    fi
    # A teardown error, a library's complaint, a traceback.
    if grep -qE 'Traceback|Exception ignored|Failed to|rnic libibverbs:' "$log"; then
        grep -E 'Traceback|Exception ignored|Failed to|rnic libibverbs:' "$log" | sort | uniq -c >&2
        bad=1
    fi
    local odd
    odd=$(grep -oE " \.\.\. skipped .*$" "$log" | grep -vE "$allowed" || true)
    if [ -n "$odd" ]; then
        echo "rdma-core tests, $what: skipped for a reason not allowed:" >&2
        echo "$odd" | sort | uniq -c >&2
        bad=1
    fi
    if [ "$bad" != 0 ]; then
        echo "rdma-core tests, $what: FAILED (the log: tail of $log)" >&2
        tail -40 "$log" >&2
        return 1
    fi
}

run "loopback device" ""   # none configured: rnic0 on a loopback wire
# A device alone on a UDP wire: the suite's traffic between its QPs never
# leaves the NIC. The peer address is the discard port, where nothing is
# sent.
run "device on a UDP wire" "wire=udp:127.0.0.1:0=127.0.0.1:9"
