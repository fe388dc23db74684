"""Post-hoc scaling of a trained LoRA adapter: a factor on each LoRA layer's scaling, for a block or for good.

A LoRA layer adds ``scaling * B A x`` to its base output. Multiplying ``scaling`` by a factor
interpolates between the base model (0) and the trained adapter (1), or extrapolates past it
(WiSE-FT's weight-space ensemble, for an adapter). :class:`Scale` says the factor per decoder layer:
``uniform(alpha)`` everywhere, or ``depth(lo, hi)``, linear in the layer index from ``lo`` at the
first decoder layer to ``hi`` at the last (LiNeS: shallow layers, which hold general features, keep
less of the update). A LoRA layer outside the numbered decoder layers takes the mean of ``lo`` and
``hi``.

:func:`scaled` applies a scale for a ``with`` block and puts every layer's scaling back exactly
(the saved numbers, not a division); :func:`bake` multiplies each layer's ``lora_B`` weight by its
factor, so the adapter's saved weights (and PEFT loading them) give the scaled model with the
scaling untouched.

Example:
    >>> Scale.depth(0.5, 1.0).factor(0, 3), Scale.depth(0.5, 1.0).factor(1, 3), Scale.uniform(0.25).factor(None, 3)
    (0.5, 0.75, 0.25)
    >>> Scale.of("depth", 0.5), Scale.of("uniform", 2.0).change
    (Scale(profile='depth', lo=0.5, hi=1.0), 2.0)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from replaybank.errors import ReplayBankError

__all__ = ["PROFILES", "Profile", "Scale", "bake", "lora_layers", "scaled"]

Profile = Literal["uniform", "depth"]
PROFILES: tuple[Profile, ...] = ("uniform", "depth")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class Scale:
    """A factor per decoder layer: ``lo`` at the first, ``hi`` at the last, linear in between."""

    profile: Profile
    lo: float
    hi: float

    @classmethod
    def uniform(cls, alpha: float) -> Scale:
        return cls("uniform", float(alpha), float(alpha))

    @classmethod
    def depth(cls, lo: float, hi: float) -> Scale:
        return cls("depth", float(lo), float(hi))

    @classmethod
    def of(cls, profile: Profile, scale: float) -> Scale:
        """The configured ``scale`` under ``profile``: ``uniform(scale)``, or ``depth(scale, 1)``
        (LiNeS: the first layer at ``scale``, the last keeping the whole update)."""
        return cls.uniform(scale) if profile == "uniform" else cls.depth(scale, 1.0)

    @property
    def change(self) -> float:
        """The mean factor over the layers: how much of the trained update the scale keeps."""
        return (self.lo + self.hi) / 2

    def factor(self, layer: int | None, n_layers: int) -> float:
        """The factor of decoder layer ``layer`` of ``n_layers`` (None: outside them, the mean)."""
        if layer is None:
            return self.change
        if n_layers <= 1:
            return self.lo
        return self.lo + (self.hi - self.lo) * layer / (n_layers - 1)


def lora_layers(model: Any) -> list[tuple[Any, int | None]]:
    """Every LoRA layer of ``model`` with its decoder-layer index (None outside ``layers.N``).

    Raises:
        ReplayBankError: the model has no LoRA layer (a peer method's adapter is not scaled here).
    """
    from peft.tuners.lora import LoraLayer

    out = []
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            found = _LAYER.search(name)
            out.append((module, int(found.group(1)) if found else None))
    if not out:
        raise ReplayBankError("the model has no LoRA layer to scale (post-hoc scaling needs a LoRA adapter)")
    return out


def _factors(model: Any, scale: Scale) -> list[tuple[Any, float]]:
    layers = lora_layers(model)
    n_layers = 1 + max((i for _, i in layers if i is not None), default=0)
    return [(module, scale.factor(i, n_layers)) for module, i in layers]


@contextmanager
def scaled(model: Any, scale: Scale) -> Iterator[Any]:
    """``model`` with every LoRA layer's scaling multiplied by its factor, for the ``with`` block;
    each scaling is put back exactly as it was on exit, whatever happened inside.

    Raises:
        ReplayBankError: the model has no LoRA layer.
    """
    saved = []
    try:
        for module, f in _factors(model, scale):
            saved.append((module, dict(module.scaling)))
            for name in module.scaling:
                module.scaling[name] = module.scaling[name] * f
        yield model
    finally:
        for module, scaling in saved:
            module.scaling.clear()
            module.scaling.update(scaling)


def bake(model: Any, scale: Scale) -> None:
    """Multiply each LoRA layer's ``lora_B`` weights by its factor, for good: the adapter (and the
    PEFT folder written from it) is then the scaled one, its ``scaling`` unchanged.

    Raises:
        ReplayBankError: the model has no LoRA layer, or a layer uses DoRA (whose magnitude
            vector does not scale with ``B``).
    """
    import torch

    with torch.no_grad():
        for module, f in _factors(model, scale):
            for name in module.scaling:
                if module.use_dora.get(name):
                    raise ReplayBankError("a DoRA adapter cannot be scaled by its B weights")
                if name in module.lora_B:
                    module.lora_B[name].weight.mul_(f)
