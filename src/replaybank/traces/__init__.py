"""Trace replay for Mixture-of-Experts expert caching (numpy only; the recorder imports torch lazily).

A routing trace (``Trace``, saved with ``save_trace`` / ``load_trace``) records which experts each
token of a MoE model needed, step by step. ``simulate`` / ``compare`` replay it against per-layer
caches of C experts under LRU, LFU, LFRU, random and the offline optimum, with the correct
replay semantics (a step is atomic and needs the union of its tokens' experts) or the per-token
semantics for matched pairs. See docs/traces.md.
"""

from __future__ import annotations

from .events import Events, layer_events, union_stats
from .prefetch import predict_prefetch
from .recorder import RouterHooks, record
from .simulate import (
    POLICIES,
    Comparison,
    Counts,
    Result,
    capacities,
    capacity_for_ratio,
    compare,
    evictions,
    gap_recovered,
    simulate,
)
from .store import load_trace, read_manifest, save_trace
from .synthetic import synthetic_trace
from .trace import Trace

__all__ = [
    "POLICIES",
    "Comparison",
    "Counts",
    "Events",
    "Result",
    "RouterHooks",
    "Trace",
    "capacities",
    "capacity_for_ratio",
    "compare",
    "evictions",
    "gap_recovered",
    "layer_events",
    "load_trace",
    "predict_prefetch",
    "read_manifest",
    "record",
    "save_trace",
    "simulate",
    "synthetic_trace",
    "union_stats",
]
