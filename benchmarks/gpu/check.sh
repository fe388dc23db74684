#!/usr/bin/env bash
# The device check (benchmarks/gpu/check.py): environment, CUDA/bf16 tests, LoRA step speed vs
# transformers.Trainer, 7B-shaped peak memory, and the main job's wall time, in one call of at most
# 8 minutes on the GPU machine. Writes check.json, check.md and check.log into $OUT (or --out).
#
#   bash benchmarks/gpu/prepare.sh          # here, with PyPI: the wheels and the tokenizer to carry
#   bash benchmarks/gpu/check.sh            # there: device run, carry benchmarks/gpu/carry
#   bash benchmarks/gpu/check.sh --dry-run  # anywhere: every stage on the CPU with tiny shapes
#
# Uses the machine's own python3 and torch ($PYTHON to choose another). The carried wheels
# (benchmarks/gpu/carry/wheels, the versions of the project's .venv) are installed into a
# temporary folder ahead of the machine's own packages; a dry run uses the environment as it is.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
WHEELS=benchmarks/gpu/carry/wheels
dry=0
for arg in "$@"; do [ "$arg" = "--dry-run" ] && dry=1; done
if [ "$dry" = 0 ] && compgen -G "$WHEELS/*.whl" >/dev/null; then
  SITE=$(mktemp -d "${TMPDIR:-/tmp}/replaybank-gpu-site.XXXXXX")
  t0=$SECONDS
  "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
    --target "$SITE" "$WHEELS"/*.whl || { echo "check.sh: installing the carried wheels failed" >&2; exit 3; }
  echo "check.sh: installed $(ls "$WHEELS"/*.whl | wc -l) carried wheels into $SITE in $((SECONDS - t0)) s"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
elif [ "$dry" = 0 ]; then
  echo "check.sh: no carried wheels in $WHEELS (benchmarks/gpu/prepare.sh): the machine's own packages"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
exec "$PY" benchmarks/gpu/check.py "$@"
