"""The general-skill probe: short questions the base model answers exactly, scored teacher-forced.

Cheap (no generation): exact match of the greedy next tokens over the answer and the answer's mean
log-likelihood. The items ship in ``data/probe.jsonl``; a config may name its own file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from replaybank.llm.data.rows import IGNORE_INDEX, encode_pair
from replaybank.llm.eval.losses import collate, logits_at


@dataclass(frozen=True)
class ProbeItem:
    """A general-skill probe item: a prompt and the exact answer the base model gives."""

    prompt: str
    answer: str


def default_probe_items() -> list[ProbeItem]:
    """The embedded probe: short questions SmolLM2-135M-Instruct answers correctly (greedy)."""
    text = resources.files("replaybank.llm").joinpath("data/probe.jsonl").read_text("utf-8")
    return [ProbeItem(**json.loads(line)) for line in text.splitlines() if line.strip()]


def probe_score(model: Any, tokenizer: Any, items: Sequence[ProbeItem], pad_id: int) -> dict[str, float]:
    """Exact-match rate and mean per-token log-likelihood of the probe answers.

    Returns:
        ``{"exact_match": fraction in [0, 1], "answer_logprob": mean log p per answer token}``.
    """
    import torch

    if not items:
        raise ValueError("probe has no items")
    rows = [encode_pair(tokenizer, it.prompt, it.answer, 512) for it in items]
    # Only the answer text is checked, not the end-of-turn marker that follows it.
    n_answer = [len(tokenizer(it.answer, add_special_tokens=False)["input_ids"]) for it in items]
    was_training = model.training
    model.eval()
    hits, logps = 0, []
    device = next(model.parameters()).device
    with torch.no_grad():
        for (ids_np, lab_np), k in zip(rows, n_answer, strict=True):
            ids, att, _ = collate([(ids_np, lab_np)], pad_id)
            start = int(np.argmax(lab_np != IGNORE_INDEX))
            mask = torch.zeros((1, ids.shape[1] - 1), dtype=torch.bool)
            mask[0, start - 1 : start - 1 + k] = True  # logits that predict the k answer tokens
            logits = logits_at(model, ids.to(device), att.to(device), mask.to(device))
            target = torch.from_numpy(ids_np[start : start + k]).to(device)
            logp = torch.log_softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(1)
            logps.append(float(logp.mean()))
            hits += int(bool((logits.argmax(-1) == target).all()))
    model.train(was_training)
    return {"exact_match": hits / len(items), "answer_logprob": float(np.mean(logps))}
