"""The registration gate: an adapter's measured figures against a retention floor.

A measurement is any callable that takes the base model with the candidate adapter active and
returns ``{"retention": fraction of the base model's general-suite score kept (or None),
"domain": the adapter's own skill score (or None), "per_family": {family: retention},
"n": items}``. :func:`suite_measure` is the one replaybank ships: the general-capability suite
(:mod:`replaybank.llm.eval.suite`), retention as the loop and the main job compute it
(:func:`replaybank.llm.eval.measure.suite_retention`), plus an optional domain scorer.

:func:`gate` turns the figures into the manifest's ``figures`` and refuses an adapter whose
retention is below the floor unless forced.

Example:
    >>> gate("tools", {"retention": 0.95, "domain": 0.4}, floor=0.9)["passed"]
    True
    >>> gate("tools", {"retention": 0.8}, floor=0.9)
    Traceback (most recent call last):
    ...
    replaybank.llm.adapters.errors.GateError: adapter 'tools', field 'figures.retention': retention 80.0% is below the floor 90.0%; the library is unchanged (force=True / --force registers it anyway)
    >>> gate("tools", {"retention": 0.8}, floor=0.9, force=True)["forced"]
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from replaybank.llm.adapters.errors import GateError
from replaybank.llm.adapters.manifest import MAX_FLOOR, MAX_RETENTION

__all__ = ["Measure", "gate", "suite_measure"]

Measure = Callable[[Any], Mapping[str, Any]]
"""``measure(model) -> {"retention", "domain", "per_family", "n"}`` (missing keys are None / empty)."""


def gate(name: str, measured: Mapping[str, Any], *, floor: float | None = None, force: bool = False) -> dict[str, Any]:
    """The manifest's ``figures`` for ``measured``; refuses retention below ``floor`` unless ``force``.

    Args:
        name: the adapter (for errors).
        measured: what the measurement returned.
        floor: the retention floor (a fraction of the base model's score), or None for no gate.
        force: register below the floor anyway (recorded as ``forced``).

    Raises:
        GateError: retention below ``floor`` (or not measured while a floor is set) without
            ``force``; figures that are not finite numbers.
    """
    if not isinstance(measured, Mapping):
        raise GateError(f"the measurement returned {type(measured).__name__}, expected a mapping", adapter=name, field="figures")
    per_family = measured.get("per_family") or {}
    if not isinstance(per_family, Mapping) or not all(isinstance(f, str) and f for f in per_family):
        raise GateError(f"the measurement returned per_family {per_family!r}, expected {{family: retention}}", adapter=name,
                        field="figures.per_family")
    unknown = sorted(set(measured) - {"retention", "domain", "per_family", "n"})
    if unknown:
        raise GateError(f"the measurement returned unknown keys {unknown}", adapter=name, field=f"figures.{unknown[0]}")
    figures: dict[str, Any] = {"retention": measured.get("retention"), "domain": measured.get("domain"),
                               "per_family": dict(per_family), "n": measured.get("n"),
                               "floor": floor, "passed": None, "forced": False}
    for key in ("retention", "domain"):
        value = figures[key]
        if value is not None and not _finite(value):
            raise GateError(f"the measurement returned {value!r}, expected a finite number or None", adapter=name,
                            field=f"figures.{key}")
        figures[key] = None if value is None else float(value)
    for key, value in (("retention", figures["retention"]), *((f"per_family.{f}", v) for f, v in figures["per_family"].items())):
        if value is not None and not (_finite(value) and 0 <= value <= MAX_RETENTION):
            raise GateError(f"the measurement returned retention {value!r}, expected a ratio in [0, {MAX_RETENTION:g}] "
                            "or None", adapter=name, field=f"figures.{key}")
    n = figures["n"]
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 2**53):
        raise GateError(f"the measurement returned n {n!r}, expected a count or None", adapter=name, field="figures.n")
    if floor is None:
        return figures
    if not _finite(floor) or not 0 <= floor <= MAX_FLOOR:
        raise GateError(f"floor {floor!r} is not a fraction in [0, {MAX_FLOOR:g}] (e.g. 0.9)", adapter=name, field="floor")
    retention = figures["retention"]
    figures["passed"] = retention is not None and retention >= floor
    if not figures["passed"]:
        if not force:
            what = "no retention was measured" if retention is None else f"retention {retention:.1%} is below the floor {floor:.1%}"
            raise GateError(f"{what}; the library is unchanged (force=True / --force registers it anyway)", adapter=name,
                            field="figures.retention")
        figures["forced"] = True
    return figures


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def suite_measure(
    tokenizer: Any, *, per_family: int = 0, seed: int = 0, batch_size: int = 16, suite: str = "builtin",
    cache_dir: Path | None = None, domain: Callable[[Any], float | None] | None = None,
) -> Measure:
    """A measurement over the general-capability suite (``per_family`` items a family, 0 = all).

    The base model's answers come from the same model with the adapter disabled (cached under
    ``cache_dir``, by default ``$REPLAYBANK_CACHE/suite``); ``domain(model)``, when given, scores
    the adapter's own skill.
    """

    def measure(model: Any) -> dict[str, Any]:
        from replaybank.llm.eval.measure import suite_retention
        from replaybank.llm.eval.suite import (
            evaluate_suite,
            load_suite,
            prepare_suite,
            sample_suite,
        )
        from replaybank.llm.model import cache_dir as default_cache

        items = sample_suite(load_suite(suite), per_family, seed)
        prepared = prepare_suite(model, tokenizer, items, cache_dir=cache_dir or default_cache() / "suite",
                                 batch_size=batch_size, desc=None)
        result = evaluate_suite(model, tokenizer, prepared, batch_size=batch_size)
        return {"retention": suite_retention(result["retention"]), "per_family": result["retention"],
                "n": int(sum(result["n"].values())), "domain": domain(model) if domain is not None else None}

    return measure
