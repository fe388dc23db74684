#!/usr/bin/env bash
# Run here (PyPI reachable), before the device call: fills benchmarks/gpu/carry/ (ignored by git)
# with what benchmarks/gpu/check.sh needs on the GPU machine, where no registry can be reached:
#   wheels/   transformers, peft, accelerate, tokenizers, safetensors and regex at the versions of
#             this machine's venv, for CPython 3.12 on x86-64 Linux (the device's python3). Not torch
#             (the device's own CUDA build is used) and not huggingface-hub (its 2.x needs packages
#             the device lacks; the device's 1.x satisfies transformers' >= 1.31).
#   smollm2/  SmolLM2-135M-Instruct's config and tokenizer files, no weights: the main job's random
#             model of the same shape and the tests that need the real tokenizer.
#   PYTHON=/path/to/venv/python bash benchmarks/gpu/prepare.sh   (default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
CARRY=benchmarks/gpu/carry
PACKAGES="transformers peft accelerate tokenizers safetensors regex"
specs=()
for name in $PACKAGES; do
  specs+=("$name==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
done
rm -rf "$CARRY/wheels" && mkdir -p "$CARRY/wheels" "$CARRY/smollm2"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$CARRY/wheels" "${specs[@]}"
src=$(PYTHONPATH="$PWD/src" HF_HUB_OFFLINE=1 "$PY" -c \
  "from replaybank.llm.model import resolve_base_model as r; print(r('SmolLM2-135M-Instruct', lambda *a: None))")
for f in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
  [ -f "$src/$f" ] && cp "$src/$f" "$CARRY/smollm2/"
done
echo "prepare.sh: ${specs[*]}"
echo "prepare.sh: $(du -sh "$CARRY" | cut -f1) in $CARRY; carry it: run(command='bash benchmarks/gpu/check.sh', carry=['$CARRY'])"
