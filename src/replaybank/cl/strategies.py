"""Continual-learning strategies over one small MLP family.

A strategy is driven by the runner in one fixed order per task::

    x, y = strategy.begin_task(task, earlier_tasks)   # the tensors to train on for this task
    for each minibatch (x_b, y_b) of (x, y), for each epoch:
        strategy.observe(x_b, y_b)                     # one optimiser step (and buffer writes)
    strategy.end_task(task)                            # snapshots, bookkeeping

and evaluated through ``strategy.model``. Training is the same in every scenario (cross-entropy
over the full head); the scenario only changes evaluation (see ``streams``).

Every strategy that stores data uses the core's :class:`replaybank.ReplayBuffer`: ``er``, ``er-rr``
(replay without replacement), ``derpp`` and ``agem`` with :class:`~replaybank.admission.Reservoir` admission, ``er-balanced`` with
:class:`~replaybank.admission.GroupBalanced` (one group per class). ``pseudo``, ``generative`` and
``lwf`` store no examples by design; ``joint`` keeps everything (the upper bound).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from replaybank.cl.config import STRATEGY_NAMES, TrainConfig, check_strategies
from replaybank.cl.models import MLP, VAE
from replaybank.cl.streams import Stream, Task
from replaybank.errors import ReplayBankError

__all__ = ["STRATEGIES", "Strategy", "make_strategy"]

Tensors = tuple[torch.Tensor, torch.Tensor]


class Strategy(Protocol):
    """What the runner needs from a strategy."""

    @property
    def model(self) -> nn.Module: ...

    def begin_task(self, task: Task, earlier: Sequence[Task]) -> Tensors: ...

    def observe(self, x: torch.Tensor, y: torch.Tensor) -> float: ...

    def end_task(self, task: Task) -> None: ...


def _tensors(task: Task) -> Tensors:
    return torch.from_numpy(task.x_train), torch.from_numpy(task.y_train)


class Naive:
    """Fine-tuning with SGD on the current task only: the lower bound.

    Also the base of the other strategies, which override ``loss`` (what one step minimises),
    ``after_step`` (e.g. buffer writes), or ``begin_task`` / ``end_task``.
    """

    def __init__(
        self, stream: Stream, config: TrainConfig, generator: torch.Generator, rng: np.random.Generator
    ) -> None:
        self.stream, self.config, self.generator, self.rng = stream, config, generator, rng
        self.model = self._new_model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.lr)

    def _new_model(self) -> MLP:
        return MLP(self.stream.input_dim, self.stream.n_classes, hidden=self.config.hidden, generator=self.generator)

    def begin_task(self, task: Task, earlier: Sequence[Task]) -> Tensors:
        return _tensors(task)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.model(x), y)

    def observe(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self.model.train()
        loss = self.loss(x, y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.after_step(x, y)
        return float(loss.detach())

    def after_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        return None

    def end_task(self, task: Task) -> None:
        return None


class Joint(Naive):
    """Upper bound: before each task, a fresh model trained on the union of all tasks so far.

    Row ``i`` of its accuracy matrix is a model trained jointly on tasks ``0..i`` under the same
    protocol (epochs, batch size), so the last row is plain joint training on the whole stream.
    """

    def begin_task(self, task: Task, earlier: Sequence[Task]) -> Tensors:
        self.model = self._new_model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.config.lr)
        parts = [_tensors(t) for t in (*earlier, task)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _buffer(config: TrainConfig, rng: np.random.Generator, *, balanced: bool, reshuffled: bool = False) -> Any:
    from replaybank import ReplayBuffer
    from replaybank.admission import GroupBalanced, Reservoir
    from replaybank.samplers import Reshuffled

    admission = GroupBalanced() if balanced else Reservoir()
    sampler = Reshuffled() if reshuffled else None  # None: the buffer's default, uniform with replacement
    return ReplayBuffer(config.buffer_size, admission=admission, sampler=sampler, seed=int(rng.integers(2**63 - 1)))


class ER(Naive):
    """Experience replay (Chaudhry et al. 2019, "On Tiny Episodic Memories"), reservoir buffer.

    Each step concatenates the stream batch with ``replay_batch_size`` buffer items, drawn
    uniformly with replacement, under one cross-entropy, then offers the stream batch to the
    buffer.
    """

    balanced = False
    reshuffled = False

    def __init__(
        self, stream: Stream, config: TrainConfig, generator: torch.Generator, rng: np.random.Generator
    ) -> None:
        super().__init__(stream, config, generator, rng)
        self.buffer = _buffer(config, rng, balanced=self.balanced, reshuffled=self.reshuffled)

    def replay(self, *columns: str) -> list[torch.Tensor] | None:
        if len(self.buffer) == 0:
            return None
        n = self.config.replay_batch_size
        if self.reshuffled:  # without replacement a draw cannot exceed what is stored
            n = min(n, len(self.buffer))
        data = self.buffer.sample(n).data
        return [torch.from_numpy(np.asarray(data[c])) for c in columns]

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        replayed = self.replay("x", "y")
        if replayed is not None:
            x, y = torch.cat([x, replayed[0]]), torch.cat([y, replayed[1]])
        return F.cross_entropy(self.model(x), y)

    def after_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.store(x, y)

    def store(self, x: torch.Tensor, y: torch.Tensor, **extra: np.ndarray) -> None:
        labels = y.numpy()
        groups = labels if self.balanced else None
        self.buffer.extend({"x": x.numpy(), "y": labels, **extra}, groups=groups)


class ERReshuffled(ER):
    """ER whose replay draws cycle through a shuffled buffer (random reshuffling, no replacement).

    The buffer's :class:`~replaybank.samplers.Reshuffled` sampler serves every stored item once
    per pass before any repeats, as Avalanche's replay data loader cycles through its buffer;
    plain ``er`` draws with replacement. Until the buffer holds ``replay_batch_size`` items (never,
    in the DER protocol, after the first step) a step replays all it holds.
    """

    reshuffled = True


class ERBalanced(ER):
    """Experience replay with a class-balanced buffer (GroupBalanced admission, groups = labels)."""

    balanced = True


class DERpp(ER):
    """DER++ (Buzzega et al. 2020): replay stored logits (MSE) and stored labels (cross-entropy).

    ``loss = CE(f(x), y) + alpha * MSE(f(x'), z') + beta * CE(f(x''), y'')`` with ``(x', z')`` and
    ``(x'', y'')`` two independent buffer draws and ``z'`` the logits recorded when ``x'`` was
    stored.
    """

    alpha = 0.2
    beta = 1.0

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.model(x)
        self._last_logits = logits.detach()
        loss = F.cross_entropy(logits, y)
        first = self.replay("x", "logits")
        second = self.replay("x", "y")
        if first is not None and second is not None:
            loss = loss + self.alpha * F.mse_loss(self.model(first[0]), first[1])
            loss = loss + self.beta * F.cross_entropy(self.model(second[0]), second[1])
        return loss

    def after_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.store(x, y, logits=self._last_logits.numpy().astype(np.float32))


class AGEM(ER):
    """A-GEM (Chaudhry et al. 2019): project the step so the loss on a buffer draw does not rise.

    If ``g . g_ref < 0`` the gradient becomes ``g - (g . g_ref / g_ref . g_ref) g_ref``.
    """

    def observe(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self.model.train()
        params = list(self.model.parameters())
        replayed = self.replay("x", "y")
        g_ref = None
        if replayed is not None:
            g_ref = torch.autograd.grad(F.cross_entropy(self.model(replayed[0]), replayed[1]), params)
        loss = F.cross_entropy(self.model(x), y)
        grads = torch.autograd.grad(loss, params)
        if g_ref is not None:
            flat, flat_ref = torch.cat([g.flatten() for g in grads]), torch.cat([g.flatten() for g in g_ref])
            dot = torch.dot(flat, flat_ref)
            if dot < 0:
                scale = dot / torch.dot(flat_ref, flat_ref)
                grads = tuple(g - scale * r for g, r in zip(grads, g_ref, strict=True))
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        self.optimizer.step()
        self.store(x, y)
        return float(loss.detach())


def _distill(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher || student) on temperature-softened distributions, scaled by T^2 (Hinton et al.)."""
    log_p = F.log_softmax(student_logits / temperature, dim=1)
    q = F.softmax(teacher_logits / temperature, dim=1)
    return F.kl_div(log_p, q, reduction="batchmean") * temperature**2


class LwF(Naive):
    """Learning without Forgetting (Li & Hoiem 2016), single-head variant.

    After each task the model is frozen as a teacher; on later tasks the student's logits over the
    classes seen so far are distilled towards the teacher's (temperature 2, weight 1) on the
    current inputs. No examples are stored.
    """

    temperature = 2.0
    weight = 1.0

    def __init__(
        self, stream: Stream, config: TrainConfig, generator: torch.Generator, rng: np.random.Generator
    ) -> None:
        super().__init__(stream, config, generator, rng)
        self.teacher: nn.Module | None = None
        self.old_classes: list[int] = []

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.model(x)
        loss = F.cross_entropy(logits, y)
        if self.teacher is not None:
            with torch.no_grad():
                target = self.teacher(x)[:, self.old_classes]
            loss = loss + self.weight * _distill(logits[:, self.old_classes], target, self.temperature)
        return loss

    def end_task(self, task: Task) -> None:
        self.teacher = copy.deepcopy(self.model).eval()
        self.old_classes = sorted(set(self.old_classes) | set(task.classes))


class PseudoRehearsal(Naive):
    """Pseudo-rehearsal with random inputs (Robins 1995; the shared reference text).

    Each step draws ``n_pseudo`` inputs from N(0, I) and adds ``KL(targets || model)`` on them to
    the cross-entropy on the stream batch, where ``targets`` are soft outputs of the model as it
    was *before the updates on the current task* (a frozen copy taken at the end of the previous
    task; nothing is added on the first task). No examples are stored.

    ``targets="step"`` instead takes the targets from the model just before each step, as the
    reference's code does. That term is zero with zero gradient (KL of a distribution with
    itself, at its minimum), so for SGD it reproduces naive fine-tuning exactly; the tests pin
    this.
    """

    n_pseudo = 64  # random inputs per step (docs/cl.md, `pseudo`)

    def __init__(
        self,
        stream: Stream,
        config: TrainConfig,
        generator: torch.Generator,
        rng: np.random.Generator,
        *,
        targets: Literal["task", "step"] = "task",
    ) -> None:
        super().__init__(stream, config, generator, rng)
        if targets not in ("task", "step"):
            raise ReplayBankError(f"targets must be 'task' or 'step', got {targets!r}")
        self.targets = targets
        self.teacher: nn.Module | None = None

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(self.model(x), y)
        teacher = self.model if self.targets == "step" else self.teacher
        if teacher is None:
            return loss
        noise = torch.randn((self.n_pseudo, self.stream.input_dim), generator=self.generator)
        with torch.no_grad():
            targets = F.softmax(teacher(noise), dim=1)
        log_probs = F.log_softmax(self.model(noise), dim=1)
        return loss + F.kl_div(log_probs, targets, reduction="batchmean")

    def end_task(self, task: Task) -> None:
        self.teacher = copy.deepcopy(self.model).eval()


class GenerativeReplay(Naive):
    """Deep generative replay (Shin et al. 2017) with a small VAE as the generator.

    The VAE trains alongside the classifier on the stream batch plus its predecessor's samples.
    From the second task on, each step adds ``replay_batch_size`` inputs drawn from the previous
    task's frozen VAE, labelled by the previous task's frozen classifier (argmax over the classes
    seen so far), under one cross-entropy with the stream batch.
    """

    generator_lr = 1e-3

    def __init__(
        self, stream: Stream, config: TrainConfig, generator: torch.Generator, rng: np.random.Generator
    ) -> None:
        super().__init__(stream, config, generator, rng)
        self.vae = VAE(stream.input_dim, generator=generator)
        self.vae_optimizer = torch.optim.Adam(self.vae.parameters(), lr=self.generator_lr)
        self.old_vae: VAE | None = None
        self.old_model: nn.Module | None = None
        self.old_classes: list[int] = []

    def _replay(self) -> Tensors | None:
        if self.old_vae is None or self.old_model is None:
            return None
        x = self.old_vae.sample(self.config.replay_batch_size, self.generator)
        with torch.no_grad():
            y = torch.tensor(self.old_classes)[self.old_model(x)[:, self.old_classes].argmax(dim=1)]
        return x, y

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        replayed = self._replay()
        if replayed is not None:
            x, y = torch.cat([x, replayed[0]]), torch.cat([y, replayed[1]])
        self._generator_step(x)
        return F.cross_entropy(self.model(x), y)

    def _generator_step(self, x: torch.Tensor) -> None:
        self.vae.train()
        loss = self.vae.loss(x, self.generator)
        self.vae_optimizer.zero_grad()
        loss.backward()
        self.vae_optimizer.step()

    def end_task(self, task: Task) -> None:
        self.old_vae = copy.deepcopy(self.vae).eval()
        self.old_model = copy.deepcopy(self.model).eval()
        self.old_classes = sorted(set(self.old_classes) | set(task.classes))


StrategyFactory = Callable[[Stream, TrainConfig, torch.Generator, np.random.Generator], Strategy]

STRATEGIES: dict[str, StrategyFactory] = {
    "naive": Naive,
    "joint": Joint,
    "er": ER,
    "er-rr": ERReshuffled,
    "er-balanced": ERBalanced,
    "derpp": DERpp,
    "agem": AGEM,
    "lwf": LwF,
    "pseudo": PseudoRehearsal,
    "generative": GenerativeReplay,
}
if tuple(STRATEGIES) != STRATEGY_NAMES:  # the names are listed torch-free in config for the CLI
    raise ImportError("replaybank.cl.strategies.STRATEGIES is out of sync with config.STRATEGY_NAMES")


def make_strategy(
    name: str, stream: Stream, config: TrainConfig, generator: torch.Generator, rng: np.random.Generator
) -> Strategy:
    """Build a strategy by name; ``generator`` seeds the model and torch noise, ``rng`` the buffer.

    Raises:
        ReplayBankError (a ValueError): unknown name; the message lists the valid ones.
    """
    check_strategies([name])
    return STRATEGIES[name](stream, config, generator, rng)
