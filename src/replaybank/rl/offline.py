"""Trajectory replay for offline RL: load episodes into a buffer, learn values from slices.

Trajectory-level Replay samples whole runs of consecutive steps and, in reverse order, updates the
last step first, so a reward at an episode's end reaches earlier states within one pass instead of
one step per sweep. This module shows it with tabular Q-learning on a chain MDP:

* ``chain_dataset`` makes episodes of a behaviour policy on the chain (numpy, seeded);
* ``load_trajectories`` writes episodes into a ``ReplayBuffer`` (``done`` marks episode ends);
* ``learn_q`` draws batches (``Trajectories`` slices, or single transitions for ``Uniform``) and
  applies Q-learning updates step by step along each slice, in the order the sampler gives;
* ``updates_to_propagate`` counts transition updates until the start state's value is reached.

    replaybank rl offline --out runs/rl/offline

Pure numpy: no torch needed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from replaybank import ReplayBuffer, Trajectories, Uniform
from replaybank.errors import ReplayBankError

Scheme = Literal["uniform", "forward", "reverse"]
SCHEMES: tuple[str, ...] = ("uniform", "forward", "reverse")
LEFT, RIGHT = 0, 1


@dataclass
class OfflineArgs:
    """The chain-MDP experiment: reverse vs forward trajectory replay vs uniform transitions."""

    n_states: int = field(default=20, metadata={"help": "chain length; reward 1 on reaching the last state"})
    episodes: int = field(default=100, metadata={"help": "episodes in the offline dataset"})
    p_right: float = field(default=0.8, metadata={"help": "behaviour policy's probability of moving right"})
    gamma: float = field(default=0.95, metadata={"help": "discount"})
    learning_rate: float = field(default=0.5, metadata={"help": "tabular Q-learning step size"})
    slice_length: int = field(default=10, metadata={"help": "steps per trajectory slice"})
    batch_slices: int = field(default=8, metadata={"help": "slices per batch (uniform draws slices x length)"})
    fraction: float = field(default=0.9, metadata={"help": "start value counts as reached at this share of V*"})
    max_updates: int = field(default=500_000, metadata={"help": "give up after this many transition updates"})
    seeds: int = field(default=3, metadata={"help": "seeds 0..N-1"})
    out: str = field(default="runs/rl/offline", metadata={"help": "output directory"})


def chain_dataset(
    n_states: int, episodes: int, p_right: float, rng: np.random.Generator, max_steps: int | None = None
) -> list[dict[str, np.ndarray]]:
    """Episodes of a random behaviour policy on a chain ``0 - 1 - ... - n_states-1``.

    Every episode starts in state 0; ``RIGHT`` moves one state right, ``LEFT`` one left (state 0
    stays). Entering the last state gives reward 1 and terminates; episodes longer than
    ``max_steps`` (default ``4 * n_states``) are truncated (``terminal`` stays False).

    Returns one dict per episode with columns ``state, action, reward, next_state, terminal``.
    """
    if n_states < 2:
        raise ReplayBankError(f"n_states must be >= 2, got {n_states}")
    if not 0.0 < p_right <= 1.0:
        raise ReplayBankError(f"p_right must lie in (0, 1], got {p_right}")
    max_steps = 4 * n_states if max_steps is None else max_steps
    out: list[dict[str, np.ndarray]] = []
    for _ in range(episodes):
        moves = np.where(rng.random(max_steps) < p_right, RIGHT, LEFT)
        states, s = [], 0
        for a in moves:
            states.append(s)
            s = min(s + 1, n_states - 1) if a == RIGHT else max(s - 1, 0)
            if s == n_states - 1:
                break
        t = len(states)
        state = np.array(states, dtype=np.int64)
        next_state = np.append(state[1:], s)
        terminal = np.zeros(t, dtype=bool)
        terminal[-1] = s == n_states - 1
        out.append({
            "state": state, "action": moves[:t].astype(np.int64), "reward": terminal.astype(np.float32),
            "next_state": next_state, "terminal": terminal,
        })
    return out


def load_trajectories(
    episodes: Sequence[dict[str, np.ndarray]], sampler: Any, *, capacity: int | None = None, seed: int = 0
) -> ReplayBuffer:
    """A ``ReplayBuffer`` holding ``episodes`` in order, with a ``done`` column set on each
    episode's last step (the boundary ``Trajectories`` slices never cross).

    Args:
        episodes: dicts of equal-length columns, one per episode (any columns but ``done``).
        sampler: e.g. ``Trajectories(8, reverse=True)`` or ``Uniform()``.
        capacity: buffer capacity (default: the total number of steps).
        seed: the buffer's seed.
    """
    if not episodes:
        raise ReplayBankError("load_trajectories: no episodes given")
    lengths = []
    for k, ep in enumerate(episodes):
        if "done" in ep:
            raise ReplayBankError(f"episode {k} has a 'done' column; it is set from episode boundaries")
        sizes = {name: len(col) for name, col in ep.items()}
        if len(set(sizes.values())) != 1 or 0 in sizes.values():
            raise ReplayBankError(f"episode {k}: columns must have one equal, non-zero length, got {sizes}")
        lengths.append(next(iter(sizes.values())))
    total = int(sum(lengths))
    columns = {name: np.concatenate([ep[name] for ep in episodes]) for name in episodes[0]}
    done = np.zeros(total, dtype=bool)
    done[np.cumsum(lengths) - 1] = True
    buffer = ReplayBuffer(capacity or total, sampler=sampler, seed=seed)
    buffer.extend({**columns, "done": done})
    return buffer


def learn_q(buffer: ReplayBuffer, q: np.ndarray, batch: int, gamma: float, learning_rate: float) -> np.ndarray:
    """Tabular Q-learning from one batch. ``Trajectories`` batches have shape (batch, L): their
    steps are applied position by position in the sampler's order (last step first when reversed),
    each position one vectorised update; a ``Uniform`` batch is a single update. Returns the
    batch's |TD errors| (flat).
    """
    data = buffer.sample(batch).data
    s, a, r, s2, term = (np.asarray(data[k]) for k in ("state", "action", "reward", "next_state", "terminal"))
    if s.ndim == 1:  # uniform transitions: one position of width batch
        s, a, r, s2, term = (x[:, None] for x in (s, a, r, s2, term))
    td_all = []
    for j in range(s.shape[1]):
        target = r[:, j] + gamma * (~term[:, j]) * q[s2[:, j]].max(axis=1)
        # repeated (state, action) pairs in one position: average their targets
        total = np.zeros_like(q)
        count = np.zeros_like(q)
        np.add.at(total, (s[:, j], a[:, j]), target)
        np.add.at(count, (s[:, j], a[:, j]), 1.0)
        hit = count > 0
        td = total[hit] / count[hit] - q[hit]
        q[hit] += learning_rate * td
        td_all.append(np.abs(td))
    return np.concatenate(td_all)


def make_offline_sampler(scheme: str, slice_length: int) -> Any:
    if scheme == "uniform":
        return Uniform()
    if scheme in ("forward", "reverse"):
        return Trajectories(slice_length, reverse=scheme == "reverse")
    raise ReplayBankError(f"unknown scheme {scheme!r}; valid schemes: {', '.join(SCHEMES)}")


def updates_to_propagate(args: OfflineArgs, scheme: str, seed: int) -> dict[str, Any]:
    """Transition updates until ``max_a Q(0, a) >= fraction * V*(0)`` on the chain.

    Every scheme processes ``batch_slices * slice_length`` transitions per batch, drawn from the
    same dataset (seeded by ``seed``). Returns the count (None if ``max_updates`` ran out) and the
    start value after each batch.
    """
    rng = np.random.default_rng(seed)
    episodes = chain_dataset(args.n_states, args.episodes, args.p_right, rng)
    sampler = make_offline_sampler(scheme, args.slice_length)
    buffer = load_trajectories(episodes, sampler, seed=seed)
    v_star = args.gamma ** (args.n_states - 2)  # reward 1 on the (n-1)-th step right
    q = np.zeros((args.n_states, 2))
    per_batch = args.batch_slices * args.slice_length
    batch = args.batch_slices if scheme != "uniform" else per_batch
    done_updates, history = 0, []
    while done_updates < args.max_updates:
        learn_q(buffer, q, batch, args.gamma, args.learning_rate)
        done_updates += per_batch
        history.append(float(q[0].max()))
        if q[0].max() >= args.fraction * v_star:
            return {"updates": done_updates, "start_value": history, "v_star": v_star}
    return {"updates": None, "start_value": history, "v_star": v_star}


def run(args: OfflineArgs) -> dict[str, Any]:
    """Every scheme x seed; writes ``DIR/offline.json`` and ``DIR/offline.png``."""
    for name in ("n_states", "episodes", "slice_length", "batch_slices", "max_updates", "seeds"):
        if getattr(args, name) <= 0:
            raise ReplayBankError(f"{name} must be positive, got {getattr(args, name)!r}")
    if args.slice_length > args.n_states - 1:
        raise ReplayBankError(
            f"slice_length {args.slice_length} exceeds the shortest possible episode ({args.n_states - 1} steps)"
        )
    runs = {s: [updates_to_propagate(args, s, seed) for seed in range(args.seeds)] for s in SCHEMES}
    table = {s: [r["updates"] for r in rs] for s, rs in runs.items()}
    result = {"args": asdict(args), "updates_to_propagate": table}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "offline.json").write_text(json.dumps(result, indent=2) + "\n")
    _plot(out / "offline.png", runs, args)
    return result


def _plot(path: Path, runs: dict[str, list[dict[str, Any]]], args: OfflineArgs) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_batch = args.batch_slices * args.slice_length
    fig, ax = plt.subplots(figsize=(6, 4))
    for (scheme, rs), color in zip(runs.items(), ("C0", "C1", "C2")):
        for k, r in enumerate(rs):
            x = per_batch * np.arange(1, len(r["start_value"]) + 1)
            ax.plot(x, r["start_value"], color=color, alpha=0.7, label=scheme if k == 0 else None)
    ax.axhline(args.fraction * runs["uniform"][0]["v_star"], color="grey", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("transition updates")
    ax.set_ylabel("max_a Q(start, a)")
    ax.set_title(f"chain MDP ({args.n_states} states): value reaching the start state")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
