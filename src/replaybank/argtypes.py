"""Argparse ``type=`` functions shared by the command-line tools: a bad value is refused at parsing,
with argparse naming the option (``argument --lr: 'inf': expected a finite number > 0``).

>>> integer_at_least(1)("3"), positive_real("0.3")
(3, 0.3)
>>> integer_at_least(0)("1.5")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: '1.5' is not an integer (expected an integer >= 0)
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["integer_at_least", "positive_real"]


def integer_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low`` (``nan``, ``inf``, ``1.5`` and smaller values refused)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer (expected an integer >= {low})") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low} (expected an integer >= {low})")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def positive_real(text: str) -> float:
    """An argparse ``type``: a finite number > 0 (``inf``, ``nan``, ``0``, ``-0.1`` refused)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number > 0 (e.g. 0.3)")
    return value
