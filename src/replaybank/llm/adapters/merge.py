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

:func:`aggregate` merges the learners of one skill (adapters trained on it by different seeds or
data shards) with equal weights (:func:`aggregate_weights`) into one adapter of that skill.

Example:
    >>> aggregate_weights(2, "linear"), aggregate_weights(2, "ties")
    ([0.5, 0.5], [1.0, 1.0])
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
from replaybank.llm.adapters.errors import AdapterNotFoundError, FingerprintError, MergeError
from replaybank.llm.adapters.gate import Measure
from replaybank.llm.adapters.library import AdapterLibrary, Registration, name_list
from replaybank.llm.adapters.manifest import DENSITY_TYPES, MAX_RANK, Manifest

__all__ = ["COMBINATIONS", "DENSITY", "EQUAL_RANKS", "Combination", "aggregate", "aggregate_weights", "check_ranks", "merge"]

Combination = Literal["linear", "cat", "svd", "ties", "dare_ties", "dare_linear", "magnitude_prune", "ties_svd",
                      "dare_ties_svd", "dare_linear_svd", "magnitude_prune_svd"]
COMBINATIONS: tuple[str, ...] = Combination.__args__  # type: ignore[attr-defined]
#: types PEFT allows only on adapters of one rank
EQUAL_RANKS = ("linear", "ties", "dare_ties", "dare_linear", "magnitude_prune")
#: types that need ``density`` (the kept share)
DENSITY = DENSITY_TYPES
#: types whose merge is a disjoint mean (TIES: the mean over the adapters that agree in sign)
_DISJOINT_MEAN = ("ties", "dare_ties", "ties_svd", "dare_ties_svd")


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
    skill: str | None = None, examples: Sequence[str] | None = None, domain: str | None = None,
    data: Mapping[str, Any] | None = None, measure: Measure | None = None, floor: float | None = None, force: bool = False,
) -> Manifest:
    """Merge adapters ``names`` of ``library`` into a new entry ``into``; return its manifest.

    ``base_model`` is the bare base model they were trained on; it is given back as it was (the
    adapters are put on for the merge and taken off after). ``weights`` default to ``1 / n`` each;
    ``density`` is required by the pruning types; ``skill`` defaults to the parents' skills joined by
    ``+``; ``domain`` and ``data`` (the training data's manifest) are recorded as given.

    Raises:
        MergeError: ``names``, ``weights`` or ``examples`` given as one string (a string is not a
            list of names), unknown combination type, ranks it cannot combine, a missing or
            out-of-range ``density``, an ``svd_rank`` that is not a rank, weights that do not match
            the names or are not finite, fewer than one adapter, repeats.
        FingerprintError: adapters registered for different base models, or not for this one.
        GateError, AdapterExistsError, ...: as :meth:`AdapterLibrary.add`.
    """
    names = name_list(names, "adapters", MergeError)
    if not names or len(set(names)) != len(names):
        raise MergeError(f"expected distinct adapter names, got {names}", adapter=", ".join(names), field="adapters")
    if combination_type not in COMBINATIONS:
        raise MergeError(f"unknown combination type {combination_type!r}; one of {', '.join(COMBINATIONS)}",
                         adapter=", ".join(names), field="combination_type")
    if isinstance(weights, (str, bytes)):
        raise MergeError(f"weights must be a list of numbers, got one string {weights!r}", adapter=", ".join(names),
                         field="weights")
    if isinstance(examples, (str, bytes)):
        raise MergeError(f"examples must be a list of prompts, got one string {examples!r}", adapter=", ".join(names),
                         field="examples")
    try:
        weights = [1.0 / len(names)] * len(names) if weights is None else [_weight(w) for w in weights]
    except (TypeError, ValueError):
        raise MergeError(f"weights must be numbers, got {weights!r}", adapter=", ".join(names), field="weights") from None
    if len(weights) != len(names) or not all(math.isfinite(w) for w in weights):
        raise MergeError(f"expected {len(names)} finite weights, got {weights}", adapter=", ".join(names), field="weights")
    if density is not None and (isinstance(density, bool) or not isinstance(density, (int, float)) or not 0 < density <= 1):
        raise MergeError(f"density {density!r} is not a share in (0, 1]", adapter=", ".join(names), field="density")
    if combination_type in DENSITY and density is None:
        raise MergeError(f"combination type {combination_type!r} needs density in (0, 1], got None",
                         adapter=", ".join(names), field="density")
    if svd_rank is not None and (isinstance(svd_rank, bool) or not isinstance(svd_rank, int) or not 1 <= svd_rank <= MAX_RANK):
        raise MergeError(f"svd_rank {svd_rank!r} is not a rank in [1, {MAX_RANK}]", adapter=", ".join(names), field="svd_rank")
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
        registration = Registration(
            into, skill=skill or "+".join(dict.fromkeys(m.skill for m in manifests.values())), domain=domain, data=data,
            examples=list(examples) if examples is not None else [e for m in manifests.values() for e in m.examples],
            fingerprint=first.fingerprint, base_name=first.base_name, parents=names,
            merge={"combination_type": combination_type, "weights": weights, "density": density, "svd_rank": svd_rank},
        )
        return library.add(peft_model, registration, adapter_name=merged_name, measure=measure, floor=floor, force=force,
                           base_model=peft_model if measure is not None else None)
    finally:
        detach(peft_model, names[0], wrapped=True)


def _weight(value: Any) -> float:
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(value)
    return float(value)


def aggregate_weights(n: int, combination_type: str) -> list[float]:
    """Equal weights for ``n`` learners of one skill under PEFT's convention for ``combination_type``.

    ``1 / n`` each where the type sums the weighted adapters (``cat``, ``svd``: exactly the mean of
    the deltas; ``linear``: the mean of the deltas plus the cross terms ``B_i A_j / n``;
    ``dare_linear``, ``magnitude_prune``): ``1`` each where it takes a disjoint mean (``ties``,
    ``dare_ties`` and their ``_svd`` forms already divide by the number of adapters that agree in
    sign, so ``1 / n`` would shrink the result ``n``-fold).
    """
    return [1.0] * n if combination_type in _DISJOINT_MEAN else [1.0 / n] * n


def aggregate(
    library: AdapterLibrary, skill: str, *, into: str, base_model: Any, combination_type: Combination = "linear",
    density: float | None = None, names: Sequence[str] | None = None, svd_rank: int | None = None, seed: int = 0,
    measure: Measure | None = None, floor: float | None = None, force: bool = False,
) -> Manifest:
    """Merge the learners of ``skill`` (one adapter per seed or data shard) into ``into``; its manifest.

    The learners are every adapter registered with skill ``skill`` that is not itself a merge
    (``parents`` empty; so an earlier aggregate is not aggregated again), or exactly ``names``. They
    are merged by :func:`merge` with :func:`aggregate_weights`; the result is registered with skill
    ``skill``, the learners' example prompts (concatenated, repeats dropped) as routing examples,
    their common domain, and as ``data`` ``{"aggregate": {"skill", "parents"}, "parents": {name:
    {"sha256", "source", "domain", "data"}}}`` (each learner's training data manifest).

    Raises:
        AdapterNotFoundError: no adapter of the library has skill ``skill`` (field ``skill``), or a
            name in ``names`` is not registered.
        MergeError: fewer than 2 learners; a name in ``names`` registered for another skill; and as
            :func:`merge` (ranks, density, combination type).
        FingerprintError: learners of different base models (:func:`merge`'s check).
    """
    index = library.index()
    if names is not None:
        names = name_list(names, "adapters", MergeError)
    if names is None:
        same = [n for n in sorted(index) if index[n].get("skill") == skill]
        if not same:
            known = ", ".join(sorted({repr(r.get("skill")) for r in index.values()})) or "none"
            raise AdapterNotFoundError(f"{library.root}: no adapter has skill {skill!r} (skills: {known})", field="skill")
        names = [n for n in same if not library.manifest(n).parents]
    manifests = {n: library.manifest(n) for n in names}
    for n, m in manifests.items():
        if m.skill != skill:
            raise MergeError(f"registered with skill {m.skill!r}, not {skill!r}; merge adapters of different skills "
                             "with merge()", adapter=n, field="skill")
    if len(manifests) < 2:
        raise MergeError(f"aggregating skill {skill!r} needs at least 2 of its adapters (learners), got "
                         f"{len(manifests)}: {', '.join(manifests) or 'none'}", adapter=", ".join(manifests) or None,
                         field="skill")
    domains = {m.domain for m in manifests.values()}
    data = {"aggregate": {"skill": skill, "parents": list(manifests)},
            "parents": {n: {"sha256": m.sha256, "source": m.source, "domain": m.domain, "data": m.data}
                        for n, m in manifests.items()}}
    return merge(
        library, list(names), into=into, base_model=base_model, combination_type=combination_type,
        weights=aggregate_weights(len(manifests), combination_type), density=density, svd_rank=svd_rank, seed=seed,
        skill=skill, examples=list(dict.fromkeys(e for m in manifests.values() for e in m.examples)),
        domain=domains.pop() if len(domains) == 1 else None, data=data, measure=measure, floor=floor, force=force,
    )
