#!/usr/bin/env bash
# Builds the guests compiled from this repository (guests/: the Rhai guest,
# `wasm:rhai`, the Boa guest, `wasm:boa`, and the QuickJS guest) for wasm32-wasip1, and puts them in
# the guest directory next to the fetched ones (default ~/.cache/codeact/guests; set
# CODEACT_GUEST_DIR to move it). guests/fetch-guests.sh runs this at its end.
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
# The QuickJS guest's C sources need zig's C compiler (from PyPI).
"$(dirname "$0")/fetch-zig.sh"
# Its own target directory: the host's build never shares artifacts with it.
# From guests/, so its .cargo/config.toml (the guests' stack size) applies.
TARGET=${CODEACT_GUEST_TARGET_DIR:-$PWD/target/guests}
(cd guests && cargo build --release --locked --quiet --target wasm32-wasip1 \
  --workspace --target-dir "$TARGET")
# crate in guests/ | file in the guest directory (see runtimes/wasm/src/guests.rs)
for entry in "codeact_rhai_guest|codeact-rhai-0.1.0.wasm" "codeact_boa_guest|codeact-boa-0.1.0.wasm" "codeact_quickjs_guest|codeact-quickjs-0.1.0.wasm"; do
  IFS='|' read -r crate file <<<"$entry"
  install -m 0644 "$TARGET/wasm32-wasip1/release/$crate.wasm" "$DIR/$file.new"
  mv "$DIR/$file.new" "$DIR/$file"
  echo "ok      $file (built from guests/)"
done
