#!/usr/bin/env bash
# The test command: set up .venv if needed, then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1
.venv/bin/ruff check src tests
.venv/bin/mypy src/replaybank
# -n auto: one worker per core (2 here); worksteal keeps both busy while the long end-to-end
# tests run. Every test still runs; pass -n 0 to run them in one process.
.venv/bin/python -m pytest -q -n auto --dist worksteal --doctest-modules src/replaybank tests "$@"
