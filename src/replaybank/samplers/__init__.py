"""Samplers: which stored items a batch holds.

``Uniform`` (with replacement), ``Reshuffled`` (without replacement, once per epoch),
``Prioritized`` (sum tree, importance weights), ``PrioritizedReshuffled`` (RR-M) and
``Trajectories`` (episode slices that never cross an episode boundary).
"""

from .base import Sampler, View
from .per import Prioritized
from .reshuffled import Reshuffled
from .rrm import PrioritizedReshuffled
from .trajectories import Trajectories
from .uniform import Uniform

__all__ = [
    "Sampler",
    "View",
    "Uniform",
    "Reshuffled",
    "Prioritized",
    "PrioritizedReshuffled",
    "Trajectories",
]
