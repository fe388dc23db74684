"""The retention gate's keys: ``[evaluation] retention_floor`` and ``gate_arm``, checked and resolved.

``retention_floor`` is a number in [0, 1] for every suite family, or a table ``{family = number}``
(the families it leaves out keep :data:`~.schema.RETENTION_FLOOR`); ``gate_arm`` names the arm that
``replaybank run --require-floor`` gates (empty: the best rehearsal arm of the targets). A bad value
is a :class:`ConfigError` naming the file, its line (when the config came from a file) and the key.

Example:
    >>> resolve_floors({"code": 0.8}, ["conversation", "code"])
    {'conversation': 0.9, 'code': 0.8}
    >>> check_gate_keys(0.9, "", ["base", "naive"], "run.toml", None)
    >>> check_gate_keys({"cod": 0.8}, "", ["naive"], "run.toml", "[evaluation]\\nretention_floor = {cod = 0.8}\\n")
    Traceback (most recent call last):
    ...
    replaybank.llm.config.ConfigError: run.toml:2: [evaluation] retention_floor names an unknown family 'cod'; did you mean 'code'?
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from replaybank.llm.config.schema import RETENTION_FLOOR
from replaybank.llm.config.values import ConfigError, did_you_mean, key_line

__all__ = ["check_gate_keys", "known_families", "resolve_floors"]


def known_families() -> tuple[str, ...]:
    """The suite's families (:data:`replaybank.llm.eval.suite.FAMILIES`)."""
    from replaybank.llm.eval.suite import FAMILIES

    return tuple(FAMILIES)


def check_gate_keys(floor: Any, gate_arm: str, arms: Sequence[str], source: str, text: str | None) -> None:
    """Check ``retention_floor`` and ``gate_arm`` (``arms``: ``[evaluation] arms``).

    Args:
        floor: the ``retention_floor`` value as read.
        gate_arm: the ``gate_arm`` value.
        arms: the arms the config runs.
        source: the config's file name (or ``<config>``).
        text: the config file's text, to name the line (None: no line).

    Raises:
        ConfigError: a floor that is not a number or a table of numbers, a number outside [0, 1]
            (or not finite), an unknown family, or a gate arm that is ``base`` or not run.
    """
    if isinstance(floor, dict):
        families = known_families()
        for fam, value in floor.items():
            path = ["evaluation", "retention_floor", str(fam)]
            if fam not in families:
                raise ConfigError(
                    f"{_where(source, text, path)}[evaluation] retention_floor names an unknown family {fam!r}"
                    f"{did_you_mean(str(fam), families)}"
                )
            _check_number(value, f"{_where(source, text, path)}[evaluation] retention_floor.{fam} = {value!r}")
    else:
        path = ["evaluation", "retention_floor"]
        _check_number(floor, f"{_where(source, text, path)}[evaluation] retention_floor = {floor!r}",
                      also=" or a table {family = number}")
    if gate_arm and (gate_arm == "base" or gate_arm not in arms):
        trained = [a for a in arms if a != "base"]
        raise ConfigError(
            f"{_where(source, text, ['evaluation', 'gate_arm'])}[evaluation] gate_arm = {gate_arm!r}: expected one of "
            f"the trained arms of [evaluation] arms ({', '.join(trained) or 'none'}), or empty for the best rehearsal arm"
        )


def resolve_floors(floor: float | dict[str, float], families: Sequence[str]) -> dict[str, float]:
    """The floor of each of ``families`` (a checked ``retention_floor``).

    Example:
        >>> resolve_floors(0.85, ["conversation", "arithmetic"])
        {'conversation': 0.85, 'arithmetic': 0.85}
    """
    if isinstance(floor, dict):
        return {f: float(floor.get(f, RETENTION_FLOOR)) for f in families}
    return {f: float(floor) for f in families}


def _check_number(value: Any, where: str, also: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: expected a number in [0, 1]{also}")
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise ConfigError(f"{where}: expected a number in [0, 1] (a share of the base model's score){also}")


def _where(source: str, text: str | None, path: list[str]) -> str:
    line = key_line(text, ".".join(path[:-1]), path[-1]) if text is not None and len(path) > 1 else None
    return f"{source}:{line}: " if line is not None else f"{source}: "
