#!/usr/bin/env bash
# Installs playwright-core (pinned; the driver only, no browser download) from npm
# into ~/.cache/codeact-browser, where cli/tests/serve.rs's page test looks for it to
# drive the system's Chromium (Debian's `chromium`). Needs node and npm; without
# them it says so and exits 1 (the page test then reports itself skipped).
set -euo pipefail
VERSION=1.65.1
DIR="$HOME/.cache/codeact-browser"
ENTRY="$DIR/node_modules/playwright-core/package.json"
if [ -f "$ENTRY" ] && grep -q "\"version\": \"$VERSION\"" "$ENTRY"; then
  exit 0
fi
command -v npm >/dev/null || { echo "fetch-browser-driver: npm is not installed (apt-get install nodejs npm)" >&2; exit 1; }
mkdir -p "$DIR"
cd "$DIR"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-audit --no-fund --silent "playwright-core@$VERSION"
[ -f "$ENTRY" ] || { echo "fetch-browser-driver: installed, but $ENTRY is missing" >&2; exit 1; }
