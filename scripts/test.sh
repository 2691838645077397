#!/usr/bin/env bash
# Runs the whole test suite: unit tests of every crate, the integration tests
# (package rnic-tests) and doc tests. Its output ends with cargo test's
# "test result:" lines. Extra arguments go to `cargo test`, e.g.
# `scripts/test.sh -- --nocapture`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --workspace "$@"
