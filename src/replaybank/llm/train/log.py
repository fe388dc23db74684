"""What one run of the LoRA loop did, step by step: written by the loop, saved in its checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainLog:
    """What one training run did, step by step."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    resumed_from_step: int = 0
    refreshes: list[dict[str, Any]] = field(default_factory=list)
    """One entry per rewrite of a source's rows (``selfgen``): ``source``, ``step`` (after which),
    ``seconds`` (generating them), ``train_seconds`` (training since the source's previous
    rewrite) and the source's own counts."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "evals": self.evals,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 3),
            "tokens_per_second": round(self.tokens / self.seconds, 1) if self.seconds else None,
            "resumed_from_step": self.resumed_from_step,
            **({"refreshes": self.refreshes} if self.refreshes else {}),  # logs without them read as before
        }
