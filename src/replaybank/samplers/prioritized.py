"""Prioritized replay: the public names of the prioritized samplers and of their priority checks,
at the import path they have always had.

``Prioritized`` (proportional PER) is defined in :mod:`.per`, ``PrioritizedReshuffled`` (RR-M,
a subclass of it) in :mod:`.rrm`, and ``check_priorities`` / ``leaf_limit`` in :mod:`.priorities`.
This module only imports them; none of them imports it, so there is no import circle.
"""

from __future__ import annotations

from .per import Prioritized
from .priorities import check_priorities, leaf_limit
from .rrm import PrioritizedReshuffled

__all__ = ["Prioritized", "PrioritizedReshuffled", "check_priorities", "leaf_limit"]
