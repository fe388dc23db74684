"""Merging library adapters into a new one with PEFT's ``add_weighted_adapter``.

What each combination type makes of adapters ``i`` with weights ``w_i``, LoRA matrices ``A_i``,
``B_i`` and scalings ``s_i = alpha_i / r_i`` (the merged adapter has ``lora_alpha = r``, scaling 1):

* ``cat``: ``A = [w_1 s_1 A_1; w_2 s_2 A_2; ...]``, ``B = [B_1, B_2, ...]``, so
  ``delta W = sum_i w_i s_i B_i A_i`` exactly; rank ``sum r_i`` (ranks may differ).
* ``linear``: ``A = sum_i sqrt(w_i s_i) A_i``, ``B = sum_i sqrt(w_i s_i) B_i`` (same ranks); ``delta W``
  then has cross terms ``B_i A_j``: it is **not** the weighted sum of the deltas.
* ``svd``: the weighted sum of the deltas, truncated to ``svd_rank`` (default the largest rank) by SVD.
* ``ties``, ``dare_ties``, ``dare_linear``, ``magnitude_prune``: task-arithmetic merges of ``A`` and
  ``B`` with sign election / random drops / pruning at ``density`` (same ranks); the DARE types draw
  from torch's global generator, seeded here with ``seed``.

The merged adapter is registered in the library (``parents``, ``merge`` in its manifest; the
parents' example prompts unless others are given), through the same gate as any registration.

Example:
    >>> check_ranks({"a": 4, "b": 8}, "cat")
    >>> check_ranks({"a": 4, "b": 8}, "linear")
    Traceback (most recent call last):
    ...
    replaybank.llm.adapters.errors.MergeError: adapter 'a, b', field 'r': combination type 'linear' needs adapters of one rank, got a: r=4, b: r=8; use 'cat' or 'svd' (any ranks)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from replaybank.llm.adapters.attach import detach, rank_of
from replaybank.llm.adapters.errors import FingerprintError, MergeError
from replaybank.llm.adapters.gate import Measure
from replaybank.llm.adapters.library import AdapterLibrary
from replaybank.llm.adapters.manifest import Manifest

__all__ = ["COMBINATIONS", "EQUAL_RANKS", "Combination", "check_ranks", "merge"]

Combination = Literal["linear", "cat", "svd", "ties", "dare_ties", "dare_linear", "magnitude_prune", "ties_svd",
                      "dare_ties_svd", "dare_linear_svd", "magnitude_prune_svd"]
COMBINATIONS: tuple[str, ...] = Combination.__args__  # type: ignore[attr-defined]
#: types PEFT allows only on adapters of one rank
EQUAL_RANKS = ("linear", "ties", "dare_ties", "dare_linear", "magnitude_prune")
_DENSITY = ("ties", "dare_ties", "dare_linear", "magnitude_prune", "ties_svd", "dare_ties_svd", "dare_linear_svd",
            "magnitude_prune_svd")


def check_ranks(ranks: Mapping[str, int], combination_type: str) -> None:
    """Refuse ranks ``combination_type`` cannot combine (see :data:`EQUAL_RANKS`).

    Raises:
        MergeError: naming every adapter with its rank.
    """
    if combination_type in EQUAL_RANKS and len(set(ranks.values())) > 1:
        listed = ", ".join(f"{n}: r={r}" for n, r in ranks.items())
        raise MergeError(f"combination type {combination_type!r} needs adapters of one rank, got {listed}; "
                         "use 'cat' or 'svd' (any ranks)", adapter=", ".join(ranks), field="r")


def merge(
    library: AdapterLibrary, names: Sequence[str], *, into: str, base_model: Any, weights: Sequence[float] | None = None,
    combination_type: Combination = "linear", density: float | None = None, svd_rank: int | None = None, seed: int = 0,
    skill: str | None = None, examples: Sequence[str] | None = None, measure: Measure | None = None,
    floor: float | None = None, force: bool = False,
) -> Manifest:
    """Merge adapters ``names`` of ``library`` into a new entry ``into``; return its manifest.

    ``base_model`` is the bare base model they were trained on; it is given back as it was (the
    adapters are put on for the merge and taken off after). ``weights`` default to ``1 / n`` each;
    ``density`` is required by the pruning types; ``skill`` defaults to the parents' skills joined by
    ``+``.

    Raises:
        MergeError: unknown combination type, ranks it cannot combine, a missing ``density``,
            weights that do not match the names or are not finite, fewer than one adapter, repeats.
        FingerprintError: adapters registered for different base models, or not for this one.
        GateError, AdapterExistsError, ...: as :meth:`AdapterLibrary.add`.
    """
    names = list(names)
    if not names or len(set(names)) != len(names):
        raise MergeError(f"expected distinct adapter names, got {names}", adapter=", ".join(names), field="adapters")
    if combination_type not in COMBINATIONS:
        raise MergeError(f"unknown combination type {combination_type!r}; one of {', '.join(COMBINATIONS)}",
                         adapter=", ".join(names), field="combination_type")
    weights = [1.0 / len(names)] * len(names) if weights is None else [float(w) for w in weights]
    if len(weights) != len(names) or not all(math.isfinite(w) for w in weights):
        raise MergeError(f"expected {len(names)} finite weights, got {weights}", adapter=", ".join(names), field="weights")
    if combination_type in _DENSITY and (density is None or not 0 < density <= 1):
        raise MergeError(f"combination type {combination_type!r} needs density in (0, 1], got {density!r}",
                         adapter=", ".join(names), field="density")
    manifests = {n: library.verify(n) for n in names}
    check_ranks({n: rank_of(library.adapter_config(n)) for n in names}, combination_type)
    prints = {m.fingerprint for m in manifests.values()}
    if len(prints) > 1:
        listed = ", ".join(f"{n}: {m.fingerprint[:16]}" for n, m in manifests.items())
        raise FingerprintError(f"adapters of different base models cannot be merged ({listed})",
                               adapter=", ".join(names), field="base_model.fingerprint")
    import torch
    from peft import PeftModel

    if isinstance(base_model, PeftModel):
        raise MergeError("base_model is a PEFT model; pass the bare base model (model.get_base_model() after "
                         "unloading its adapters)", adapter=", ".join(names), field="base_model")
    merged_name = f"merged-{into}"
    peft_model = library.load(names[0], base_model, adapter_name=names[0])  # wraps the bare base model
    try:
        for n in names[1:]:
            library.load(n, peft_model, adapter_name=n)
        torch.manual_seed(seed)  # PEFT's DARE types drop entries with torch's global generator
        try:
            peft_model.add_weighted_adapter(names, weights, merged_name, combination_type=combination_type,
                                            svd_rank=svd_rank, density=density)
        except ValueError as exc:
            raise MergeError(f"PEFT refused the merge: {exc}", adapter=", ".join(names), field="combination_type") from None
        first = manifests[names[0]]
        return library.add(
            into, model=peft_model, adapter_name=merged_name, base_model=peft_model if measure is not None else None,
            fingerprint=first.fingerprint, base_name=first.base_name,
            skill=skill or "+".join(dict.fromkeys(m.skill for m in manifests.values())),
            examples=list(examples) if examples is not None else [e for m in manifests.values() for e in m.examples],
            measure=measure, floor=floor, force=force, parents=names, source=None,
            merge={"combination_type": combination_type, "weights": weights, "density": density, "svd_rank": svd_rank},
        )
    finally:
        detach(peft_model, names[0], wrapped=True)
