#!/usr/bin/env bash
# The test command: set up .venv if needed, then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1
.venv/bin/ruff check src tests benchmarks examples
# mypy (one thread) runs beside the tests, in the gaps their subprocesses and worker start-up
# leave; its report is printed after them, and either failing fails the command.
mypy_out=$(mktemp)
trap 'rm -f "$mypy_out"' EXIT
.venv/bin/mypy src/replaybank >"$mypy_out" 2>&1 &
mypy_pid=$!
# -n auto: one worker per core (2 here); worksteal keeps both busy while the long end-to-end
# tests run. Every test still runs; pass -n 0 to run them in one process.
status=0
.venv/bin/python -m pytest -q -n auto --dist worksteal --doctest-modules src/replaybank tests "$@" || status=$?
mypy_status=0
wait "$mypy_pid" || mypy_status=$?
cat "$mypy_out"
[ "$mypy_status" -eq 0 ] || exit "$mypy_status"
exit "$status"
