"""Continual-learning harness: streams, strategies, runner, report.

Importing this package stays numpy-only; torch is imported by ``strategies``, ``models`` and
``runner`` when they are used.
"""

from __future__ import annotations

from replaybank.cl.streams import STREAMS, Stream, Task, make_stream, permuted_stream, split_stream

__all__ = ["STREAMS", "Stream", "Task", "make_stream", "permuted_stream", "split_stream"]
