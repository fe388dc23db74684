#!/usr/bin/env bash
# The main job: set up .venv if needed, then run the embedded default experiment
# (continual LoRA fine-tuning of SmolLM2-135M: the naive, self-distill and routed arms).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh main
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec .venv/bin/replaybank run "$@"
