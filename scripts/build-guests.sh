#!/usr/bin/env bash
# Builds the guests compiled from this repository (today the Rhai guest,
# guests/rhai, the `wasm:rhai` runtime) for wasm32-wasip1, and puts them in the
# guest directory next to the fetched ones (default ~/.cache/codeact/guests; set
# CODEACT_GUEST_DIR to move it). scripts/fetch-guests.sh runs this at its end.
#
# They are not pinned by hash (their bytes depend on the toolchain), so codeact
# loads them only from a directory that this user owns and no one else may write;
# this script makes the directory so.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${CODEACT_GUEST_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeact/guests}
mkdir -p "$DIR"
chmod go-w "$DIR"

if command -v rustup >/dev/null; then
  rustup target add wasm32-wasip1 >/dev/null 2>&1 || true
fi
# Its own target directory: the host's build never shares artifacts with it.
TARGET=${CODEACT_GUEST_TARGET_DIR:-target/guests}
cargo build --release --locked --quiet --target wasm32-wasip1 \
  --manifest-path guests/rhai/Cargo.toml --target-dir "$TARGET"
install -m 0644 "$TARGET/wasm32-wasip1/release/codeact_rhai_guest.wasm" \
  "$DIR/codeact-rhai-0.1.0.wasm.new"
mv "$DIR/codeact-rhai-0.1.0.wasm.new" "$DIR/codeact-rhai-0.1.0.wasm"
echo "ok      codeact-rhai-0.1.0.wasm (built from guests/rhai)"
