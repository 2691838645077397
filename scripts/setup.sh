#!/usr/bin/env bash
# Prepares a machine to build and test rnic: the Rust toolchain with the
# rustfmt and clippy components. Idempotent, and quick when everything is
# already there (it only asks rustup when a component is missing).
set -euo pipefail

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found. Install a Rust toolchain (1.80 or newer) with rustup first:" >&2
    echo "setup:   https://rustup.rs" >&2
    exit 1
fi

missing=()
cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)

if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v rustup >/dev/null 2>&1; then
        echo "setup: missing ${missing[*]} and no rustup to install them with" >&2
        exit 1
    fi
    echo "setup: installing ${missing[*]}"
    rustup component add "${missing[@]}"
fi

echo "setup: $(cargo --version), rustfmt and clippy present"
