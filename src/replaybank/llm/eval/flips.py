"""Per-item flips: the suite items an arm lost (the base model right, the arm wrong) and gained.

Works on the per-item outcomes of :func:`replaybank.llm.eval.suite.evaluate_suite` (the base
model's are ``Suite.base["items"]``), paired by item id, whatever families they hold. An item is
right when its score is at least :data:`RIGHT` (the checkers score 0 or 1).

Example:
    >>> base = [{"id": "a", "family": "code", "prompt": "p", "score": 1.0, "answer": "x = 1"},
    ...         {"id": "b", "family": "code", "prompt": "q", "score": 0.0, "answer": "oops"}]
    >>> arm = [{"id": "a", "family": "code", "prompt": "p", "score": 0.0, "answer": "<<qx ...>>"},
    ...        {"id": "b", "family": "code", "prompt": "q", "score": 1.0, "answer": "y = 2"}]
    >>> out = flips(base, arm)
    >>> [i["id"] for i in out["lost"]], [i["id"] for i in out["gained"]], out["per_family"]
    (['a'], ['b'], {'code': {'lost': 1, 'gained': 1}})
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from replaybank.errors import ReplayBankError

__all__ = ["RIGHT", "flips", "is_right"]

RIGHT = 0.5
"""An outcome scoring at least this is right (every shipped checker scores 0 or 1)."""


def is_right(score: float) -> bool:
    """Whether an item's score counts as right.

    Example:
        >>> is_right(1.0), is_right(0.0)
        (True, False)
    """
    return float(score) >= RIGHT


def flips(base_items: Sequence[dict[str, Any]], arm_items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The items an arm lost and gained against the base model, and their count per family.

    Args:
        base_items: the base model's per-item outcomes (``id``, ``family``, ``score``, ``answer``;
            ``prompt``, ``check`` and ``detail`` when present).
        arm_items: the arm's outcomes on the same items.

    Returns:
        ``{"lost": [...], "gained": [...], "per_family": {family: {"lost": n, "gained": n}}}``, the
        lists in the arm's item order, each entry ``{"id", "family", "check", "prompt",
        "base_answer", "arm_answer", "base_detail", "arm_detail"}`` with the answers in full;
        ``per_family`` names every family of ``arm_items`` (zero counts included), in order of
        first appearance.

    Raises:
        ReplayBankError: an id repeated, or the two lists not holding the same item ids.
    """
    base = _by_id(base_items, "base")
    arm = _by_id(arm_items, "arm")
    if base.keys() != arm.keys():
        only_base, only_arm = sorted(base.keys() - arm.keys()), sorted(arm.keys() - base.keys())
        raise ReplayBankError(
            f"base and arm outcomes are not on the same items (only base: {only_base[:5]}, only arm: {only_arm[:5]})"
        )
    lost: list[dict[str, Any]] = []
    gained: list[dict[str, Any]] = []
    per_family: dict[str, dict[str, int]] = {}
    for item_id, a in arm.items():
        b = base[item_id]
        counts = per_family.setdefault(str(a["family"]), {"lost": 0, "gained": 0})
        was, now = is_right(b["score"]), is_right(a["score"])
        if was == now:
            continue
        entry = {
            "id": item_id, "family": a["family"], "check": a.get("check"), "prompt": a.get("prompt", b.get("prompt", "")),
            "base_answer": b.get("answer", ""), "arm_answer": a.get("answer", ""),
            "base_detail": b.get("detail"), "arm_detail": a.get("detail"),
        }
        (lost if was else gained).append(entry)
        counts["lost" if was else "gained"] += 1
    return {"lost": lost, "gained": gained, "per_family": per_family}


def _by_id(items: Sequence[dict[str, Any]], who: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for o in items:
        if o["id"] in out:
            raise ReplayBankError(f"{who} outcomes repeat item id {o['id']!r}")
        out[o["id"]] = o
    return out
