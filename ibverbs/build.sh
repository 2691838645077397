#!/bin/bash
# Builds the drop-in libraries in target/ibverbs: libibverbs.so.1, the
# rnic-ibverbs static library linked with libibverbs' symbol versions, and
# librdmacm.so.1, rnic-rdmacm's linked with librdmacm's, against it.
#   bash ibverbs/build.sh [--release]
#   LD_LIBRARY_PATH=target/ibverbs ibv_devices
set -euo pipefail
cd "$(dirname "$0")/.."
profile=debug
args=()
if [ "${1:-}" = --release ]; then
    profile=release
    args=(--release)
fi
cargo build -q -p rnic-ibverbs -p rnic-rdmacm "${args[@]}"
target="${CARGO_TARGET_DIR:-target}"
out="$target/ibverbs"
mkdir -p "$out"
gcc -shared -o "$out/libibverbs.so.1.tmp" \
    -Wl,-soname,libibverbs.so.1 \
    -Wl,--version-script=ibverbs/libibverbs.map \
    -Wl,--whole-archive "$target/$profile/librnic_ibverbs.a" -Wl,--no-whole-archive \
    -lpthread -ldl -lm -lgcc_s
mv "$out/libibverbs.so.1.tmp" "$out/libibverbs.so.1"
ln -sf libibverbs.so.1 "$out/libibverbs.so"
gcc -shared -o "$out/librdmacm.so.1.tmp" \
    -Wl,-soname,librdmacm.so.1 \
    -Wl,--version-script=rdmacm/librdmacm.map \
    -Wl,--whole-archive "$target/$profile/librnic_rdmacm.a" -Wl,--no-whole-archive \
    -L"$out" -libverbs -lpthread -ldl -lm -lgcc_s
mv "$out/librdmacm.so.1.tmp" "$out/librdmacm.so.1"
ln -sf librdmacm.so.1 "$out/librdmacm.so"
echo "$out/libibverbs.so.1"
