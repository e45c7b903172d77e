#!/usr/bin/env bash
# Installs the MCP project's reference server (`server-everything`, pinned) from npm
# into ~/.cache/codeact-mcp, where cli/tests/suite/mcp.rs looks for it. Needs node and
# npm; without them it says so and exits 1 (the tests that need the server then
# fail unless CODEACT_ALLOW_MISSING_MCP=1).
set -euo pipefail
VERSION=2026.8.31
DIR="$HOME/.cache/codeact-mcp"
ENTRY="$DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
if [ -f "$ENTRY" ] && grep -q "\"version\": \"$VERSION\"" "$DIR/node_modules/@modelcontextprotocol/server-everything/package.json"; then
  exit 0
fi
command -v npm >/dev/null || { echo "fetch-mcp-server: npm is not installed (apt-get install nodejs npm)" >&2; exit 1; }
mkdir -p "$DIR"
cd "$DIR"
npm install --no-audit --no-fund --silent "@modelcontextprotocol/server-everything@$VERSION"
[ -f "$ENTRY" ] || { echo "fetch-mcp-server: installed, but $ENTRY is missing" >&2; exit 1; }
