"""replaybank: experience replay that is fast, correct and measured.

Core names are re-exported here; ``import replaybank`` needs only numpy.

>>> import numpy as np, replaybank
>>> buf = replaybank.ReplayBuffer(100, seed=0)
>>> _ = buf.extend({"x": np.arange(10)})
>>> len(buf)
10
"""

from .admission import Fifo, GroupBalanced, Reservoir, Window
from .buffer import Batch, ReplayBuffer
from .errors import CorruptSaveError, EmptyBufferError, InsufficientMemoryError, ReplayBankError
from .nstep import nstep_returns
from .ragged import Ragged
from .samplers import Prioritized, PrioritizedReshuffled, Reshuffled, Trajectories, Uniform
from .spec import ColumnSpec
from .storage import ColumnarStorage, MemmapStorage, RaggedStorage

__version__ = "0.1.0"

__all__ = [
    "ReplayBuffer",
    "Batch",
    "Ragged",
    "ColumnSpec",
    "nstep_returns",
    "Fifo",
    "Reservoir",
    "GroupBalanced",
    "Window",
    "Uniform",
    "Reshuffled",
    "Prioritized",
    "PrioritizedReshuffled",
    "Trajectories",
    "ColumnarStorage",
    "MemmapStorage",
    "RaggedStorage",
    "ReplayBankError",
    "InsufficientMemoryError",
    "CorruptSaveError",
    "EmptyBufferError",
]
