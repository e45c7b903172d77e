#!/usr/bin/env bash
# Measures codeact's backends and the peer sandboxes in one run, one after the
# other, and writes BENCHMARKS.md (our figures, theirs, ratios, machine, date).
#
#   benches/peers/benchmarks.sh [--quick] [--skip-peers] [--runtime NAMES]
#
# The peers' Python environment lives outside git, in $PEERS_DIR (default
# ~/.cache/peers-bench), set up by the peers' own setup.sh (PyPI). Our raw JSON goes
# to $CODEACT_BENCH_DIR (default ~/.cache/codeact/bench). --skip-peers reuses the
# peers' last results.json. Takes ~10 minutes; needs the wasm guests
# (guests/fetch-guests.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

QUICK=()
SKIP_PEERS=0
RUNTIME=all
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--quick) ;;
    --skip-peers) SKIP_PEERS=1 ;;
    --runtime) RUNTIME="$2"; shift ;;
    *) echo "usage: $0 [--quick] [--skip-peers] [--runtime NAMES]" >&2; exit 2 ;;
  esac
  shift
done

PEERS_SRC=${CODEACT_PEERS:-../shared/peers}
[ -f "$PEERS_SRC/bench_peers.py" ] || PEERS_SRC=/work/shared/peers
export PEERS_DIR=${PEERS_DIR:-$HOME/.cache/peers-bench}
BENCH_DIR=${CODEACT_BENCH_DIR:-$HOME/.cache/codeact/bench}
mkdir -p "$BENCH_DIR"

echo "--- build (release)"
cargo build --release --locked -p codeact-cli --bin codeact
CODEACT="${CARGO_TARGET_DIR:-target}/release/codeact"

echo "--- codeact bench (progress on stderr)"
"$CODEACT" bench --runtime "$RUNTIME" --json "${QUICK[@]}" > "$BENCH_DIR/codeact.json" \
  || echo "WARNING: codeact bench reported a case or backend that could not run (see the report)"

PEERS_JSON="$PEERS_DIR/results.json"
if [ "$SKIP_PEERS" = 0 ]; then
  if [ -f "$PEERS_SRC/setup.sh" ]; then
    echo "--- peers: setup ($PEERS_DIR)"
    bash "$PEERS_SRC/setup.sh"
    echo "--- peers: bench_peers.py (about 5 minutes)"
    "$PEERS_DIR/.venv/bin/python" "$PEERS_SRC/bench_peers.py"
  else
    echo "WARNING: no peers' benchmark at $PEERS_SRC; BENCHMARKS.md will have our figures only"
  fi
fi

echo "--- BENCHMARKS.md"
python3 benches/peers/benchmarks_report.py --ours "$BENCH_DIR/codeact.json" --peers "$PEERS_JSON" \
  --notes benches/peers/benchmarks-notes.md --command "benches/peers/benchmarks.sh ${QUICK[*]}" --out BENCHMARKS.md
