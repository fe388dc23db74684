#!/usr/bin/env bash
# The test command: set up .venv if needed, then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1
.venv/bin/ruff check src tests
.venv/bin/mypy src/replaybank
.venv/bin/python -m pytest -q --doctest-modules src/replaybank tests "$@"
