"""Failures of a sharded buffer's actors. Bad input still raises ``ReplayBankError``."""

from __future__ import annotations


class ShardError(RuntimeError):
    """A shard actor could not complete a call."""


class ShardFailedError(ShardError):
    """The shard actor died during the call (it is restarted from its last checkpoint when
    ``max_restarts`` allows; the call itself is not retried, so its effect is unknown)."""


class ShardTimeoutError(ShardError, TimeoutError):
    """A shard did not answer within the buffer's ``timeout``."""
