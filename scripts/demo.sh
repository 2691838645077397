#!/usr/bin/env bash
# Runs the loopback demo (examples/loopback.rs, built by package rnic-tests): it
# drives the emulated device through the driver, moving data between queue
# pairs in RoCEv2 frames over a loopback wire. Extra arguments go to the
# example. scripts/pingpong.sh runs two NICs in two processes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo run --release --example loopback -- "$@"
