"""Ray, imported on first use, and waiting on shard calls with clear errors.

Importing :mod:`replaybank.dist` does not import Ray; the buffer calls :func:`ray_module` when it
starts actors or waits on them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .errors import ShardFailedError, ShardTimeoutError


def ray_module() -> Any:
    """The ``ray`` module, initialised (without dashboard) if no session is running.

    Raises:
        ImportError: Ray is not installed (it comes with the ``dist`` extra).
    """
    try:
        import ray
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "replaybank.dist needs Ray: pip install 'replaybank[dist]'"
        ) from err
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    return ray


def get(refs: Any, shards: Sequence[int] | None, *, wait: float, timeout: float) -> Any:
    """``ray.get`` of one ref or a list of refs, waiting ``wait`` seconds for all of them.

    Args:
        refs: one Ray object ref, or a list of them (the answer has the same form).
        shards: the shard each ref belongs to, named in errors (``None``: "a shard").
        wait: seconds to wait for every answer together.
        timeout: the buffer's timeout, named in the error message.

    Raises:
        ShardFailedError: a shard died during the call.
        ShardTimeoutError: a shard did not answer within ``wait`` seconds.
        Exception: the shard's own error for bad input (unwrapped from Ray's ``RayTaskError``).
    """
    ray = ray_module()
    single = not isinstance(refs, list)
    refs_list = [refs] if single else refs
    where = list(shards) if shards is not None else [None] * len(refs_list)
    deadline = time.monotonic() + wait
    out = []
    for ref, shard in zip(refs_list, where):
        name = "a shard" if shard is None else f"shard {shard}"
        try:
            out.append(ray.get(ref, timeout=max(deadline - time.monotonic(), 0.0)))
        except ray.exceptions.GetTimeoutError:
            raise ShardTimeoutError(
                f"{name} did not answer within {timeout:g} s (is it overloaded, or restarting?); "
                "raise timeout= or check the Ray logs"
            ) from None
        except ray.exceptions.RayActorError as err:
            raise ShardFailedError(
                f"{name} died during the call ({type(err).__name__}); the call may or may not have "
                "taken effect. With max_restarts > 0 it restarts from its last checkpoint() and later "
                "calls succeed"
            ) from err
        except ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
    return out[0] if single else out
