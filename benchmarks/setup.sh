#!/usr/bin/env bash
# The benchmark's own environments, idempotent. Peers are not dependencies of the project.
#   bash benchmarks/setup.sh           .venv-bench: replaybank plus cpprb and TorchRL
#   bash benchmarks/setup.sh --rllib   .venv-bench-rllib: replaybank plus ray[rllib] (for
#                                      benchmarks/dist.py; kept apart because RLlib pins an older
#                                      gymnasium than the project's venv)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--rllib" ]; then
  [ -x .venv-bench-rllib/bin/python ] || python3 -m venv .venv-bench-rllib
  if [ ! -f .venv-bench-rllib/.ready ]; then
    pipr() { .venv-bench-rllib/bin/python -m pip --disable-pip-version-check -q "$@"; }
    pipr install "torch==2.13.0"         # the local CPU wheel first; pinned again below
    pipr install -e . "ray[rllib]==2.60.0" numpy "torch==2.13.0"
    touch .venv-bench-rllib/.ready
  fi
  exit 0
fi
[ -x .venv-bench/bin/python ] || python3 -m venv .venv-bench
pip() { .venv-bench/bin/python -m pip --disable-pip-version-check -q "$@"; }
if [ ! -f .venv-bench/.ready ]; then
  pip install "torch==2.13.0"            # the local CPU wheel, before anything that needs torch
  pip install -e . psutil
  pip install cpprb || echo "cpprb unavailable: its column will be skipped" >&2
  pip install torchrl tensordict "torch==2.13.0" || echo "torchrl unavailable: its column will be skipped" >&2
  touch .venv-bench/.ready
fi
