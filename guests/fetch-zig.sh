#!/usr/bin/env bash
# Installs the C compiler the QuickJS guest (guests/quickjs) needs for
# wasm32-wasip1: zig's `cc`, from PyPI's `ziglang` wheel (pinned below), into a
# virtual environment at ~/.cache/codeact/zig (CODEACT_ZIG_DIR moves it). The
# guests' cargo configuration (guests/.cargo/config.toml) calls it through
# guests/tools/zigcc-wasi and guests/tools/zigar. Run by guests/build-guests.sh
# and .ci/run; quick when it is already there.
set -euo pipefail

ZIGLANG=ziglang==0.17.1
DIR=${CODEACT_ZIG_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeact/zig}

if [ -x "$DIR/bin/python" ] && "$DIR/bin/python" -m ziglang version >/dev/null 2>&1 \
  && [ "$("$DIR/bin/python" -m pip show ziglang 2>/dev/null | sed -n 's/^Version: //p')" = "${ZIGLANG#ziglang==}" ]; then
  exit 0
fi
python3 -m venv "$DIR"
"$DIR/bin/python" -m pip install --quiet --disable-pip-version-check "$ZIGLANG"
echo "ok      zig $("$DIR/bin/python" -m ziglang version) in $DIR"
