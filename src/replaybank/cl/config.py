"""Training protocol and strategy names: plain data, no torch, so the CLI can validate early."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from replaybank.errors import ReplayBankError

__all__ = ["PROTOCOLS", "STRATEGY_NAMES", "ProtocolName", "TrainConfig", "check_strategies", "protocol_config"]

ProtocolName = Literal["der", "online", "multi-epoch"]
PROTOCOLS: tuple[ProtocolName, ...] = ("der", "online", "multi-epoch")

# Order here is the order of report tables. "joint" is the upper bound, "naive" the lower one.
STRATEGY_NAMES: tuple[str, ...] = (
    "naive",
    "joint",
    "er",
    "er-rr",
    "er-balanced",
    "derpp",
    "agem",
    "lwf",
    "pseudo",
    "generative",
)


@dataclass(frozen=True)
class TrainConfig:
    """How every strategy trains; one config is shared by all strategies of a comparison."""

    protocol: ProtocolName = field(default="der", metadata={"help": "der | online | multi-epoch"})
    epochs: int = field(default=1, metadata={"help": "passes over each task's data"})
    batch_size: int = field(default=10, metadata={"help": "stream minibatch size"})
    replay_batch_size: int = field(default=10, metadata={"help": "items drawn from the buffer per step"})
    buffer_size: int = field(default=200, metadata={"help": "replay buffer capacity (items)"})
    lr: float = field(default=0.3, metadata={"help": "SGD learning rate of the classifier (chosen on held-out validation data, see docs/cl.md)"})
    hidden: tuple[int, ...] = field(default=(100, 100), metadata={"help": "MLP hidden widths"})

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ReplayBankError(f"unknown protocol {self.protocol!r}; valid: {', '.join(PROTOCOLS)}")
        for name in ("epochs", "batch_size", "replay_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ReplayBankError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(self.buffer_size, bool) or not isinstance(self.buffer_size, int) or self.buffer_size <= 0:
            raise ReplayBankError(f"buffer size must be a positive integer, got {self.buffer_size!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not (math.isfinite(self.lr) and self.lr > 0):
            raise ReplayBankError(f"lr must be a finite number > 0 (e.g. 0.3), got {self.lr!r}")
        if not self.hidden or any(h < 1 for h in self.hidden):
            raise ReplayBankError(f"hidden widths must be positive integers, got {self.hidden!r}")
        if self.protocol == "der" and (self.epochs, self.batch_size, self.replay_batch_size) != (1, 10, 10):
            raise ReplayBankError(
                "the der protocol fixes epochs=1, batch_size=10, replay_batch_size=10 "
                f"(got {self.epochs}, {self.batch_size}, {self.replay_batch_size}); "
                "use protocol 'online' or 'multi-epoch' to change them"
            )
        if self.protocol == "online" and self.epochs != 1:
            raise ReplayBankError(f"the online protocol is a single pass (epochs=1), got epochs={self.epochs}")


def protocol_config(
    protocol: ProtocolName,
    *,
    epochs: int | None = None,
    batch_size: int | None = None,
    replay_batch_size: int | None = None,
    **kwargs: object,
) -> TrainConfig:
    """A :class:`TrainConfig` with a protocol's defaults, overridden where a value is given.

    * ``der``: the DER paper's sequential-MNIST protocol: batch 10, replay minibatch 10, one epoch
      (Buzzega et al. 2020); the three values are fixed.
    * ``online``: single pass over each task; batch sizes default to 10.
    * ``multi-epoch``: defaults to 5 epochs with batch and replay minibatch 32.

    Example:
        >>> protocol_config("multi-epoch", buffer_size=500).epochs
        5
    """
    defaults = {"der": (1, 10, 10), "online": (1, 10, 10), "multi-epoch": (5, 32, 32)}
    if protocol not in defaults:
        raise ReplayBankError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    e, b, r = defaults[protocol]
    base = TrainConfig(protocol=protocol, epochs=e, batch_size=b, replay_batch_size=r)
    chosen = {
        "epochs": epochs if epochs is not None else e,
        "batch_size": batch_size if batch_size is not None else b,
        "replay_batch_size": replay_batch_size if replay_batch_size is not None else r,
    }
    return replace(base, **chosen, **kwargs)  # type: ignore[arg-type]


def check_strategies(names: list[str] | tuple[str, ...]) -> list[str]:
    """Validate strategy names; raises with the list of valid ones. Duplicates are an error too.

    Example:
        >>> check_strategies(["naive", "er"])
        ['naive', 'er']
    """
    if not names:
        raise ReplayBankError(f"no strategies given; valid strategies: {', '.join(STRATEGY_NAMES)}")
    unknown = [n for n in names if n not in STRATEGY_NAMES]
    if unknown:
        raise ReplayBankError(
            f"unknown strateg{'y' if len(unknown) == 1 else 'ies'} {', '.join(map(repr, unknown))}; "
            f"valid strategies: {', '.join(STRATEGY_NAMES)}"
        )
    if len(set(names)) != len(names):
        raise ReplayBankError(f"strategy listed twice in {list(names)}")
    return list(names)
