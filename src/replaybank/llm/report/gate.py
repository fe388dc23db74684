"""The retention gate: each arm's mean retention per family against ``[evaluation] retention_floor``.

The gate uses the **mean** retention over seeds (an arm passes a family when the mean is at least
the floor), not a bound of its interval; a family whose 95% interval lies wholly below the floor
(its upper bound under it) is marked ``clearly below``. Families the base model scores 0 on have
no retention and are not gated. :func:`gate_failure` is what ``replaybank run --require-floor``
asks of a finished run's metrics: None, or the one-line reason the gated arm fails.

Example:
    >>> fams = {"naive": {"code": Interval(0.5, 0.3, 0.7)}, "self": {"code": Interval(0.92, 0.85, 0.99)}}
    >>> g = evaluate_gate(fams, {"code": 0.9}, chosen="self", chosen_by="best_arm")
    >>> g.arms["naive"].families["code"].status, g.passed, gate_failure(g) is None
    ('clearly below', True, True)
"""

from __future__ import annotations

from collections.abc import Mapping

from replaybank.llm.results import Gate, GateArm, GateFamily, Interval

__all__ = ["GATE_EXIT", "RULE", "evaluate_gate", "gate_failure"]

GATE_EXIT = 3
"""Exit status of ``replaybank run --require-floor`` when the gated arm falls below a floor."""
RULE = ("an arm passes a family when its mean retention over seeds is at least the floor; "
        "'clearly below' when the upper bound of the 95% interval is below the floor")


def evaluate_gate(
    families: Mapping[str, Mapping[str, Interval | None]], floors: dict[str, float], *, chosen: str | None,
    chosen_by: str,
) -> Gate:
    """Every arm's pass/fail per family, and whether the chosen arm passes.

    Args:
        families: ``{arm: {family: retention interval | None}}`` (the trained arms' retention of
            :func:`replaybank.llm.report.families.family_summary`).
        floors: ``{family: floor}``.
        chosen: the arm the gate decides on (None: no arm to gate).
        chosen_by: how it was chosen (``gate_arm`` or ``best_arm``).

    Returns:
        The :class:`~replaybank.llm.results.Gate`; a family's ``status`` is ``pass``, ``fail``,
        ``clearly below`` or ``n/a`` (no retention).
    """
    arms: dict[str, GateArm] = {}
    for arm, fams in families.items():
        rows: dict[str, GateFamily] = {}
        for fam, ret in fams.items():
            if fam not in floors:
                continue
            floor = floors[fam]
            if ret is None:
                rows[fam] = GateFamily(retention=None, low=None, high=None, floor=floor, status="n/a")
                continue
            status = "pass" if ret.mean >= floor else "clearly below" if ret.high < floor else "fail"
            rows[fam] = GateFamily(retention=ret.mean, low=ret.low, high=ret.high, floor=floor, status=status)
        failed = [f for f, r in rows.items() if r.status in ("fail", "clearly below")]
        arms[arm] = GateArm(families=rows, passed=not failed, failed=failed)
    passed = chosen is not None and chosen in arms and arms[chosen].passed
    return Gate(rule=RULE, floor=dict(floors), arms=arms, chosen_arm=chosen, chosen_by=chosen_by, passed=passed)


def gate_failure(gate: Gate | None) -> str | None:
    """None when the gated arm keeps every floor, else a one-line reason naming the arm, the
    families, their retention and floors.

    Example:
        >>> g = evaluate_gate({"self": {"code": Interval(0.8, 0.7, 0.95)}}, {"code": 0.9}, chosen="self",
        ...                   chosen_by="gate_arm")
        >>> gate_failure(g)
        "retention floor not met by arm 'self' (gate_arm): code 80.0% < floor 90.0% (95% CI 70.0-95.0%)"
    """
    if gate is None:
        return "the run's metrics hold no retention gate (metrics.json schema before version 3)"
    arm = gate.chosen_arm
    if arm is None:
        return "no arm to gate: the run has no rehearsal arm; set [evaluation] gate_arm to a trained arm"
    if arm not in gate.arms:
        return f"arm {arm!r} has no per-item suite outcomes to gate"
    if gate.passed:
        return None
    rows = gate.arms[arm].families
    parts = [
        f"{fam} {rows[fam].retention:.1%} < floor {rows[fam].floor:.1%} "
        f"(95% CI {(rows[fam].low or 0.0) * 100:.1f}-{(rows[fam].high or 0.0) * 100:.1f}%)"
        for fam in gate.arms[arm].failed
    ]
    return f"retention floor not met by arm {arm!r} ({gate.chosen_by}): " + ", ".join(parts)
