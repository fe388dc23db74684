"""Exceptions raised by replaybank.

Every input problem is a ``ValueError`` subclass so callers can catch one type; the message names
the argument, column, file or key that was wrong and says what was expected instead.
"""

from __future__ import annotations


class ReplayBankError(ValueError):
    """Bad input to a replaybank API: a wrong value, shape, dtype, name or state."""


class InsufficientMemoryError(ReplayBankError, MemoryError):
    """A storage would need more memory (or disk) than is available; raised before allocating."""


class CorruptSaveError(ReplayBankError):
    """A saved buffer is truncated, altered or otherwise unreadable."""


class EmptyBufferError(ReplayBankError):
    """Sampling was asked of a buffer that holds no items."""


class InvalidArgumentError(ReplayBankError):
    """An argument's value is refused: out of range, not finite, or it would change when stored."""


class InvalidTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong type (a bool or float where an integer is meant, a string where a
    number is meant); also a ``TypeError`` so either ``except`` catches it."""


class InvalidStateError(ReplayBankError):
    """A state dict (from ``state_dict`` or a saved buffer) has unknown, missing or inconsistent
    entries: wrong types, shapes, ranges, non-finite numbers."""
