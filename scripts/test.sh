#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints (which also type-check benches), unit, integration,
# property and end-to-end tests.
# Installs what the tests need by itself (nothing beyond the Rust toolchain today).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test"
cargo test --workspace --locked
