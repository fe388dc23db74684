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
            **({"projected_share": self.projected_share()} if any("projected" in s for s in self.steps) else {}),
            **({"refreshes": self.refreshes} if self.refreshes else {}),  # left out when nothing was rewritten
        }

    def projected_share(self) -> float | None:
        """The share of the steps with rehearsal rows whose domain gradient A-GEM projected
        (:mod:`.agem`); None when no step had rehearsal rows (or none ran A-GEM)."""
        acted = [s["projected"] for s in self.steps if s.get("projected") is not None]
        return round(sum(acted) / len(acted), 4) if acted else None
