#!/usr/bin/env bash
# Runs the loopback demo (examples/loopback.rs, built by package rnic-tests): it
# drives the emulated device through the driver, moving data between queue
# pairs over the device's loopback port. Extra arguments go to the example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo run --release --example loopback -- "$@"
