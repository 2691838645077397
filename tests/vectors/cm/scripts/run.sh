#!/bin/bash
# Reproduce the RDMA CM golden captures: build the initramfs, boot two QEMU/TCG guests (A client,
# B server) joined by the recording relay, run rping/ucmatose/udaddy/rdma_server+client (+ extras),
# then decode the CM MADs, check ICRCs and write README.txt.
# Layout: $G/scripts (this dir), $G/build (initramfs), outputs in $G/out (GOLDEN_OUT overrides).
set -euo pipefail
S=$(cd "$(dirname "$0")" && pwd)
G=${G:-$(dirname "$S")}
OUT=${GOLDEN_OUT:-$G/out}; export GOLDEN_OUT=$OUT
mkdir -p "$OUT/logs"
"$G/scripts/build-initramfs.sh"
timeout 1500 python3 -u "$G/scripts/golden.py" "$@" 2>&1 | tee "$OUT/logs/golden_run.txt"   # optional args: subset of tests
python3 "$G/scripts/icrc_check.py" "$OUT"/*.pcap > "$OUT/icrc_check_output.txt" || true
python3 "$G/scripts/make_readme.py"
{ echo; echo "Negative control (icrc_check.py --selftest):"
  python3 "$G/scripts/icrc_check.py" --selftest "$OUT"/rping.pcap "$OUT"/rping_ipv6.pcap "$OUT"/udaddy.pcap; } >> "$OUT/icrc_report.txt" || true
mkdir -p "$OUT/scripts"
cp "$G"/scripts/{run.sh,golden.py,relay.py,icrc_check.py,cm_decode.py,make_readme.py,build-initramfs.sh,init} "$OUT/scripts/"
du -sh "$OUT"
