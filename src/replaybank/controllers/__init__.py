"""Replay controllers: the share of each rehearsal source, steered by held-out losses (numpy only).

A controller reads per-source statistics after each evaluation (:class:`SourceStats`, built by
:func:`summarize` from raw held-out losses) and returns the next mixture over {current domain,
each available rehearsal source}, within :class:`MixLimits` (a floor per source, a maximum
rehearsal share, an availability mask). :meth:`replaybank.mixing.Mixer.set_shares` puts it into
effect from the next batch, with the same exact per-batch quotas as fixed shares.

* ``fixed`` (:class:`FixedController`): fixed shares, as without a controller;
* ``bandit`` (:class:`BanditController`): Exp3-style weights, rewarded by the rise in held-out
  loss each source guards against, with decaying exploration;
* ``proxy`` (:class:`ProxyController`): a 7-weight policy fitted on a proxy run
  (:func:`fit_proxy`), then frozen.

Example:
    >>> import numpy as np
    >>> from replaybank.mixing import Mixer
    >>> limits = MixLimits(("tools", "agenda"), floor=0.05, max_share=0.5)
    >>> ctl = make_controller("bandit", limits, rng=np.random.default_rng(0))
    >>> mixer = Mixer([64, 20, 20], ctl.mixture([True, True]), batch_size=8, seed=0)
    >>> stats = summarize([[2.0, 1.0, 1.0], [1.5, 1.3, 1.0], [1.2, 1.5, 1.0]])
    >>> mix = ctl.update(stats, [True, True])
    >>> mixer.set_shares(mix)
    >>> mix.round(3).tolist()
    [0.807, 0.131, 0.063]
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from replaybank.controllers.bandit import BanditController, bandit_rewards, exp3_mixture
from replaybank.controllers.base import (
    CONTROLLER_SCHEMA_VERSION,
    Controller,
    ControllerError,
    MixLimits,
    SourceStats,
    constrain,
    summarize,
)
from replaybank.controllers.fixed import FixedController
from replaybank.controllers.proxy import (
    PROXY_FEATURES,
    ProxyController,
    ProxyFit,
    fit_proxy,
    proxy_mixture,
)

__all__ = [
    "CONTROLLERS", "CONTROLLER_SCHEMA_VERSION", "BanditController", "Controller", "ControllerError",
    "FixedController", "MixLimits", "PROXY_FEATURES", "ProxyController", "ProxyFit", "SourceStats",
    "RESERVED", "bandit_rewards", "check_params", "constrain", "exp3_mixture", "fit_proxy", "make_controller",
    "proxy_mixture", "summarize",
]

#: the controllers by the name a config gives
CONTROLLERS: dict[str, type] = {"fixed": FixedController, "bandit": BanditController, "proxy": ProxyController}


#: what make_controller passes itself; never a parameter from a config
RESERVED = ("limits", "rng")


def check_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` as a dict once none of them is one :func:`make_controller` passes itself
    (``limits``, ``rng``): call it before ``make_controller(name, limits, rng=..., **params)``,
    where such a key would otherwise collide with the argument (a ``TypeError``).

    Raises:
        ControllerError: naming the key and where its value comes from instead.
    """
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise ControllerError(f"controller {name!r} parameters: expected a mapping of names to values, got {params!r}")
    for key in RESERVED:
        if key in params:
            source = "the seeded generator of the run (its seed)" if key == "rng" else "the sources, floor and max_share"
            raise ControllerError(
                f"controller {name!r}: parameter {key!r} is set by replaybank from {source}, not from the "
                f"controller's parameters; remove {key!r} from them (e.g. controller_params.{key})"
            )
    return dict(params)


def make_controller(
    name: str, limits: MixLimits, /, *, rng: np.random.Generator | None = None, **params: Any
) -> Controller:
    """The controller called ``name`` over ``limits``, with its parameters.

    Args:
        name: ``"fixed"``, ``"bandit"`` or ``"proxy"``.
        limits: sources, floors, maximum rehearsal share.
        rng: the seeded generator of a controller that draws (``bandit``); ignored by the others.
        params: the controller's keyword arguments (``shares=`` for fixed, ``lr=``... for bandit,
            ``weights=`` for proxy).

    Raises:
        ControllerError: on an unknown name or parameter (with a "did you mean"), a parameter
            named ``limits`` (see :func:`check_params` for ``rng``), or a bad value.

    Example:
        >>> make_controller("bandt", MixLimits(("a",)))
        Traceback (most recent call last):
        ...
        replaybank.controllers.base.ControllerError: unknown controller 'bandt'; expected one of ['bandit', 'fixed', 'proxy']; did you mean 'bandit'?
    """
    if name not in CONTROLLERS:
        close = difflib.get_close_matches(str(name), CONTROLLERS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ControllerError(f"unknown controller {name!r}; expected one of {sorted(CONTROLLERS)}{hint}")
    cls = CONTROLLERS[name]
    check_params(name, params)
    accepted = [p for p in inspect.signature(cls).parameters if p not in ("limits", "rng")]
    for key in params:
        if key not in accepted:
            close = difflib.get_close_matches(key, accepted, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ControllerError(f"controller {name!r} has no parameter {key!r} (it takes {accepted}){hint}")
    takes_rng = "rng" in inspect.signature(cls).parameters
    if takes_rng and rng is None:
        raise ControllerError(f"controller {name!r} needs rng= (a seeded numpy.random.Generator)")
    controller: Controller = cls(limits, rng, **params) if takes_rng else cls(limits, **params)
    return controller
