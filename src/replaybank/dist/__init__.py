"""Replay past one process: a sharded buffer on Ray actors, with exact global sampling.

``ShardedReplayBuffer`` (needs the ``dist`` extra: ``pip install 'replaybank[dist]'``) has the
``ReplayBuffer`` API plus ``*_async`` variants returning Ray object refs. Rate limiters live in
``replaybank.ratelimit`` (they need no Ray). Importing this package does not import Ray.
"""

from __future__ import annotations

from typing import Any

from .errors import ShardError, ShardFailedError, ShardTimeoutError

__all__ = ["ShardedReplayBuffer", "PendingBatch", "ShardError", "ShardFailedError", "ShardTimeoutError"]


def __getattr__(name: str) -> Any:
    if name in ("ShardedReplayBuffer", "PendingBatch"):
        from . import sharded

        return getattr(sharded, name)
    raise AttributeError(f"module 'replaybank.dist' has no attribute {name!r}")
