"""Sum and min trees over the same leaves as torch tensors on a device: ``Prioritized(device=...)``.

The third tree beside ``sumtree.PairedTrees`` (numpy) and ``_numba_tree.NumbaPairTree`` (numba),
with their interface and their results: the same k-ary layout as ``KaryTree`` (every level padded
to a multiple of ``branching``, the last one holding the root), float64 leaves, the leaves'
``(p + eps) ** alpha`` and the weights' ``ratio ** -beta`` computed by numpy on the host
(``priorities.powered`` / ``importance_weights``), so the trees hold the same leaves and minimum
bit for bit. Inner sums may differ in their last bit (numpy adds a node's children pairwise, torch
in its own order; a GPU's running sums are a parallel scan), which moves a draw only when it falls
within that bit of a boundary: on the same uniform draws the CPU device gave numpy's slots and
weights in every test.

What crosses to the device and back: arrays come in and go out as numpy, because the buffer's
storage, its ids and its priority checks are on the host; a batch's slots must come back to read
its rows. Each call is one copy each way at most: an update sends indices and leaf values as one
``(3, n)`` float64 array (the min-tree values too), a sample sends the uniforms and brings back the
slots and their ``leaf / min`` ratios as one ``(2, n)`` array. Slots go through float64, exact up
to 2**53 slots. Between the copies a batch is a few torch operations per level (no Python loop
per item): the descent of ``KaryTree.find`` (gather the children, running sums, count, clamp to
the last positive child) and the refresh of ``KaryTree.update`` (each touched parent recomputed
from all its children, so a parent touched twice gets the same value twice).

torch is imported only here, and this module only when a device is asked for, so ``import
replaybank`` stays numpy-only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from .base import last_wins
from .priorities import importance_weights, powered

#: children per node when not told: fewer levels than the numba tree's 8, since every level is a
#: handful of torch operations (a kernel launch each on a GPU) whatever its width
TORCH_BRANCHING = 32


def _torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise ImportError(
            "Prioritized(device=...) keeps its priority tree in torch tensors and needs torch: "
            f"pip install 'replaybank[torch]' (or any torch >= 2.1), or leave device=None ({err})"
        ) from err
    return torch


def torch_device(device: Any, who: str) -> Any:
    """``device`` as a ``torch.device`` the torch tree can live on: ``"cpu"``, ``"cuda"`` or
    ``"cuda:N"`` (a ``torch.device`` too), checked to exist here.

    Raises:
        InvalidArgumentError: not a torch device, another kind of device, or CUDA (that GPU)
            is not available on this machine.
        ImportError: torch is not installed.

    >>> torch_device("cpu", "Prioritized")
    device(type='cpu')
    >>> torch_device("gpu", "Prioritized")
    Traceback (most recent call last):
    ...
    replaybank.errors.InvalidArgumentError: Prioritized(device='gpu'): not a torch device (...); use 'cpu', 'cuda' or 'cuda:N', or None for the numpy/numba tree
    """
    torch = _torch()
    where = f"{who}(device={device!r})"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:
        raise InvalidArgumentError(
            f"{where}: not a torch device ({str(err).splitlines()[0][:80]}); use 'cpu', 'cuda' or "
            "'cuda:N', or None for the numpy/numba tree"
        ) from None
    if dev.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(
            f"{where}: the torch priority tree runs on 'cpu' or 'cuda', not {dev.type!r} "
            "(its float64 sums need a device with float64); use None for the numpy/numba tree"
        )
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            built = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            raise InvalidArgumentError(
                f"{where}: CUDA is not available here (torch {torch.__version__}, {built}); use "
                "device='cpu' for the torch tree on the CPU, or None for the numpy/numba tree"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise InvalidArgumentError(
                f"{where}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    return dev


class TorchPairTree:
    """A sum tree and a min tree over ``capacity`` float64 leaves on ``device``, ``branching``
    children per node; zero leaves are +inf in the min tree, so empty slots never set the weights'
    normaliser.

    >>> t = TorchPairTree(5, branching=2, device="cpu")
    >>> t.update(np.array([0, 3, 3]), np.array([1.0, 9.0, 3.0]))  # the last value wins
    >>> t.total, t.minimum, t.find(np.array([0.5, 1.5, 3.9]))
    (4.0, 1.0, array([0, 3, 3]))
    """

    def __init__(self, capacity: int, *, branching: int = TORCH_BRANCHING, device: Any = "cpu") -> None:
        torch = self._torch = _torch()
        self.capacity = int(capacity)
        self.k = int(branching)
        self.device = torch.device(device)
        sizes = []
        size = max(self.capacity, 1)
        while True:  # KaryTree's levels: leaves first, the root alone (padded) last
            padded = -(-size // self.k) * self.k
            sizes.append(padded)
            if size == 1:
                break
            size = padded // self.k
        f64 = {"dtype": torch.float64, "device": self.device}
        self._sum = [torch.zeros(n, **f64) for n in sizes]
        self._min = [torch.full((n,), float("inf"), **f64) for n in sizes]
        self._children = torch.arange(self.k, device=self.device)

    @property
    def total(self) -> float:
        """The sum of the leaves (one device-to-host copy of a number)."""
        return float(self._sum[-1][0])

    @property
    def minimum(self) -> float:
        """The smallest positive leaf, ``inf`` when none is positive."""
        return float(self._min[-1][0])

    @property
    def leaves(self) -> np.ndarray:
        """The sum-tree leaves as numpy: a copy from a GPU, a view of the tensor on the CPU
        (read-only use, as the other trees' ``leaves``)."""
        return self._sum[0][: self.capacity].cpu().numpy()  # type: ignore[no-any-return]

    def _put(self, index: np.ndarray, values: np.ndarray) -> None:
        """Set leaves (a repeated index: the last value wins) and refresh their ancestors."""
        index, values = last_wins(np.asarray(index, dtype=np.int64), np.asarray(values, dtype=np.float64))
        if len(index) == 0:
            return
        packed = np.stack([index.astype(np.float64), values, np.where(values > 0, values, np.inf)])
        on = self._torch.from_numpy(packed).to(self.device)  # one copy to the device
        node = on[0].long()
        self._sum[0][node] = on[1]
        self._min[0][node] = on[2]
        k = self.k
        for level, (child_s, parent_s, child_m, parent_m) in enumerate(
            zip(self._sum, self._sum[1:], self._min, self._min[1:])
        ):
            if len(child_s) // k <= len(index):  # as many parents as leaves touched: all of them
                self._rebuild(level)  # two operations a level instead of five
                return
            node = node // k
            parent_s[node] = child_s.view(-1, k)[node].sum(1)
            parent_m[node] = child_m.view(-1, k)[node].amin(1)

    def _rebuild(self, start: int = 0) -> None:
        """Recompute every parent above level ``start`` (0: the leaves) from all its children."""
        torch, k = self._torch, self.k
        for child_s, parent_s, child_m, parent_m in zip(
            self._sum[start:], self._sum[start + 1 :], self._min[start:], self._min[start + 1 :]
        ):
            parents = len(child_s) // k
            torch.sum(child_s.view(-1, k), 1, out=parent_s[:parents])
            torch.amin(child_m.view(-1, k), 1, out=parent_m[:parents])

    def update(self, index: np.ndarray, values: np.ndarray) -> None:
        """Set ``leaves[index] = values`` (for a repeated index the last value wins)."""
        self._put(index, values)

    def update_powered(
        self, index: np.ndarray, priorities: np.ndarray, eps: float, alpha: float, *, cold: bool = False
    ) -> float:
        """Set ``leaves[index] = (priorities + eps) ** alpha`` (the last value wins for a repeated
        index); returns ``max(priorities)``, ``-inf`` when there are none. Both are computed on the
        host before the one copy (no wait for the device); ``cold`` is the numba tree's hint."""
        values, top = powered(np.asarray(priorities, dtype=np.float64), eps, alpha)
        self._put(index, values)
        return top

    def load(self, values: np.ndarray) -> None:
        """Set every leaf from ``values`` (``capacity`` of them) and rebuild both trees."""
        values = np.asarray(values, dtype=np.float64)
        torch = self._torch
        self._sum[0][: self.capacity] = torch.from_numpy(values.copy()).to(self.device)
        self._min[0][: self.capacity] = torch.from_numpy(np.where(values > 0, values, np.inf)).to(self.device)
        self._rebuild()

    def _find(self, mass: Any) -> Any:
        """``KaryTree.find`` on the device: for each float64 ``mass`` in ``[0, total)`` the leaf
        where the running sum first exceeds it, never a zero leaf; level by level for the batch."""
        torch, k = self._torch, self.k
        node = torch.zeros(len(mass), dtype=torch.int64, device=self.device)
        for level in reversed(self._sum[:-1]):
            children = level.view(-1, k)[node]  # (batch, k)
            running = children.cumsum(1)
            pick = (running <= mass[:, None]).sum(1)
            # rounding can leave mass at or past the last running sum: clamp to the last positive
            # child (-1 when none, which remainder turns into k - 1, as numpy's argmax of no True)
            last = torch.where(children > 0, self._children, -1).amax(1).remainder(k)
            pick = torch.minimum(pick, last)
            # the running sum before the chosen child (0 before the first)
            mass = mass - torch.nn.functional.pad(running, (1, 0)).gather(1, pick[:, None]).squeeze(1)
            node = torch.add(pick, node, alpha=k)  # node * k + pick, one operation
        return node

    def find(self, mass: np.ndarray) -> np.ndarray:
        """For each ``mass`` in ``[0, total)``: the leaf where the running sum first exceeds it."""
        on = self._torch.from_numpy(np.array(mass, dtype=np.float64)).to(self.device)
        return self._find(on).cpu().numpy()  # type: ignore[no-any-return]

    def _ratios(self, slots: Any) -> Any:
        return self._sum[0][slots] / self._min[-1][0]

    def weights(self, slots: np.ndarray, beta: float) -> np.ndarray:
        """``(P(i) / min_k P(k)) ** -beta``: importance weights scaled so the largest possible is 1."""
        on = self._torch.from_numpy(np.asarray(slots, dtype=np.int64)).to(self.device)
        return importance_weights(self._ratios(on).cpu().numpy(), beta)

    def stratified(self, u: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """One draw per equal slice of the mass, draw ``i`` at ``(i + u[i]) * total / n``; the
        slots (int64) and their importance weights (float32), both numpy."""
        torch = self._torch
        n = len(u)
        u_on = torch.from_numpy(np.array(u, dtype=np.float64)).to(self.device)
        mass = (torch.arange(n, dtype=torch.float64, device=self.device) + u_on) * (self._sum[-1][0] / n)
        slots = self._find(mass)
        back = torch.stack([slots.to(torch.float64), self._ratios(slots)]).cpu().numpy()  # one copy
        return back[0].astype(np.int64), importance_weights(back[1], beta)
