"""A recipe's replay controller: its keys checked, and the one place a controller is built from a recipe.

A :class:`~replaybank.llm.config.recipe.Recipe` with ``controller`` other than ``none`` steers its
rehearsal share between optimizer steps (:mod:`replaybank.controllers`): ``floor`` and
``max_share`` bound the mixture, ``controller_params`` are the controller's own parameters, and
``ratio`` is where it starts (``fixed``: the shares, split evenly over the sources; ``bandit``: its
``start_share``; ``proxy`` reads no ratio). ``ratio = "auto"`` is ``controller = "bandit"``.
The main job, the loop and :mod:`replaybank.hf` all build theirs with :func:`recipe_controller`.

Example:
    >>> from replaybank.llm.config.recipe import Recipe
    >>> ctl = recipe_controller(Recipe(source=["corpus", "self"], ratio=0.2, controller="bandit"), seed=0)
    >>> ctl.name, ctl.limits.sources, ctl.mixture([True, True]).round(3).tolist()
    ('bandit', ('corpus', 'self'), [0.753, 0.123, 0.123])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from replaybank.controllers import (
    Controller,
    ControllerError,
    MixLimits,
    check_params,
    make_controller,
)
from replaybank.llm.config.values import ConfigError, at, shown

AUTO = "auto"
#: the controller parameters a recipe sets through another key
_FROM_RATIO = {"fixed": "shares", "bandit": "start_share"}


def auto_ratio(values: dict[str, Any], where: str, table: str) -> dict[str, Any]:
    """``ratio = "auto"`` read as ``controller = "bandit"`` (the starting share left at its default).

    Raises:
        ConfigError: ``ratio = "auto"`` beside another ``controller``.
    """
    if values.get("ratio") != AUTO:
        return values
    other = values.get("controller", "bandit")
    if other != "bandit":
        raise ConfigError(
            f'{where}: [{table}] ratio = "auto" is controller = "bandit", but the table sets controller = {shown(other)}; '
            "give ratio a number (the starting share) or drop controller"
        )
    out = {k: v for k, v in values.items() if k != "ratio"}
    out["controller"] = "bandit"
    return out


def recipe_controller(spec: Any, seed: int) -> Controller | None:
    """The controller ``spec`` names over its sources (None for ``controller = "none"``).

    Args:
        spec: a checked :class:`~replaybank.llm.config.recipe.Recipe` (typed loosely: that module imports this one).
        seed: seeds the controller's generator (``bandit``); the caller's training seed.

    Raises:
        ControllerError: limits or parameters that admit no controller (see :func:`check_controller`).
    """
    if spec.controller == "none":
        return None
    limits = MixLimits(tuple(spec.source), floor=spec.floor, max_share=spec.max_share)
    params = dict(spec.controller_params)
    if spec.controller == "fixed":
        params["shares"] = spec.ratio / len(spec.source)
    elif spec.controller == "bandit":
        params["start_share"] = spec.ratio
    params = check_params(spec.controller, params)
    return make_controller(spec.controller, limits, rng=np.random.default_rng(seed), **params)


def check_controller(spec: Any, table: str, keys: set[str], source: str, text: str | None) -> None:
    """The controller keys of one recipe against each other and its sources.

    Raises:
        ConfigError: (naming ``file:line``) a controller without sources, a floor above the
            maximum share, a starting ratio outside ``[floors, max_share]``, a ``controller_params``
            that is not a table of numbers, strings or lists of numbers, a parameter the controller
            does not take (with a "did you mean") or out of range, or controller keys without a
            controller.
    """

    def where(key: str) -> str:
        return at(source, text, table, key if key in keys else "controller")

    if spec.controller == "none":
        stray = sorted(k for k in ("floor", "max_share", "controller_params", "trend_window") if k in keys)
        if stray:
            raise ConfigError(f"{where(stray[0])}: [{table}] {stray[0]} is read only with a controller; set controller = "
                              f"\"fixed\", \"bandit\" or \"proxy\" (or ratio = \"auto\"), or drop {stray[0]}")
        return
    params = spec.controller_params
    if not isinstance(params, dict):
        raise ConfigError(f"{where('controller_params')}: [{table}] controller_params = {shown(params)}: expected a table, "
                          "e.g. controller_params = {lr = 1.0, discount = 0.9}")
    for key, value in params.items():
        if not _plain(value):
            raise ConfigError(f"{where('controller_params')}: [{table}] controller_params.{key} = {shown(value)}: expected a "
                              "finite number, a string or a list of finite numbers")
        if key == _FROM_RATIO.get(spec.controller):
            raise ConfigError(f"{where('controller_params')}: [{table}] controller_params.{key}: the {spec.controller} "
                              "controller's starting share is the recipe's ratio; set ratio instead")
    if not spec.source:
        raise ConfigError(f"{where('controller')}: [{table}] controller = {spec.controller!r} steers the share of rehearsal "
                          "sources, but source = []; give a source or controller = \"none\"")
    n = len(spec.source)
    if spec.floor * n > spec.max_share + 1e-12:
        what = f"floor = {spec.floor:g}" + (f" per source x {n} sources = {spec.floor * n:g}" if n > 1 else "")
        raise ConfigError(f"{where('floor')}: [{table}] {what} is above max_share = {spec.max_share:g}; no mixture could "
                          f"hold the floors: lower floor (at most {spec.max_share / n:g}) or raise max_share")
    if spec.controller in _FROM_RATIO and not spec.floor * n - 1e-12 <= spec.ratio <= spec.max_share + 1e-12:
        raise ConfigError(f"{where('ratio')}: [{table}] ratio = {spec.ratio:g} (the {spec.controller} controller's "
                          f"starting share) lies outside [{spec.floor * n:g}, {spec.max_share:g}] (the floors, max_share)")
    if spec.controller == "proxy" and "weights" not in params:
        raise ConfigError(f"{where('controller_params')}: [{table}] controller = \"proxy\" needs controller_params.weights, "
                          "the 7 weights fitted on a proxy run (replaybank.controllers.fit_proxy)")
    try:
        recipe_controller(spec, seed=0)
    except ControllerError as exc:
        raise ConfigError(f"{where('controller_params')}: [{table}] {exc}") from None


def _plain(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    if isinstance(value, str):
        return True
    return isinstance(value, list) and all(_plain(v) and not isinstance(v, (str, list)) for v in value)
