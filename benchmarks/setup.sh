#!/usr/bin/env bash
# The benchmark's own environment (.venv-bench): replaybank plus the peers it is compared with
# (cpprb, TorchRL). They are not dependencies of the project. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv-bench/bin/python ] || python3 -m venv .venv-bench
pip() { .venv-bench/bin/python -m pip --disable-pip-version-check -q "$@"; }
if [ ! -f .venv-bench/.ready ]; then
  pip install "torch==2.13.0"            # the local CPU wheel, before anything that needs torch
  pip install -e . psutil
  pip install cpprb || echo "cpprb unavailable: its column will be skipped" >&2
  pip install torchrl tensordict "torch==2.13.0" || echo "torchrl unavailable: its column will be skipped" >&2
  touch .venv-bench/.ready
fi
