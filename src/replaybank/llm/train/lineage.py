"""Which generations of domain data a generation trains on (the lineage policy).

Generation ``g`` always trains on its own data. ``window`` adds the ``K - 1`` generations just
before it (the last ``K`` in all; in the runs of the rehearsal-corpus method, docs/llm.md, "most
recent 3" was the most stable lineage), ``all`` adds every earlier generation (it peaked, then
declined, there), and ``best`` adds the ``K - 1`` earlier generations with the highest score (it
collapsed there; kept for comparison).
"""

from __future__ import annotations

from collections.abc import Sequence

from replaybank.llm.config import Lineage


def select_lineage(
    generation: int, window: int, policy: Lineage, scores: Sequence[float] | None = None
) -> list[int]:
    """Generations whose domain data generation ``generation`` trains on, in ascending order.

    Args:
        generation: the current generation (0-based).
        window: K, the most generations trained on together (the current one included).
        policy: ``window``, ``all`` or ``best``.
        scores: one score per earlier generation (higher is better), required for ``best``.

    Returns:
        Sorted generation indices, always ending with ``generation``.

    Raises:
        ValueError: on a negative generation, ``window < 1``, an unknown policy or missing scores.

    Example:
        >>> select_lineage(5, 3, "window")
        [3, 4, 5]
        >>> select_lineage(5, 3, "all")
        [0, 1, 2, 3, 4, 5]
        >>> select_lineage(3, 2, "best", scores=[0.1, 0.9, 0.5])
        [1, 3]
    """
    if generation < 0:
        raise ValueError(f"generation must be >= 0, got {generation}")
    if window < 1:
        raise ValueError(f"training_window_size must be >= 1, got {window}")
    if policy == "window":
        return list(range(max(0, generation - window + 1), generation + 1))
    if policy == "all":
        return list(range(generation + 1))
    if policy == "best":
        if scores is None or len(scores) < generation:
            got = 0 if scores is None else len(scores)
            raise ValueError(f"lineage 'best' needs a score for each of {generation} earlier generations, got {got}")
        earlier = sorted(range(generation), key=lambda g: (-scores[g], -g))[: window - 1]
        return sorted(earlier) + [generation]
    raise ValueError(f"unknown lineage policy {policy!r}; expected window, all or best")
