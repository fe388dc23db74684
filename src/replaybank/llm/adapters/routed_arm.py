"""The ``routed`` arm of the main job: its adapter behind the library's router, the base model as fallback.

The arm trains as ``naive`` does (domain rows alone, the LoRA loop); then :func:`measure_routed`
registers the trained adapter in a scratch :class:`~.library.AdapterLibrary` (the arm's domain
training prompts as its examples), calibrates :meth:`~.route.Router.calibrated` on those examples
and the shipped general prompt pool (standing for the base model), loads the registered copy
back onto the arm's model (:meth:`~.library.AdapterLibrary.load`: hash and base fingerprint
checked) and measures with the adapter comparison's :func:`~.compare.measure_approach`: every
suite item and every held-out domain request goes to the adapter or to the bare base model as
the router decides.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

__all__ = ["ROUTED_ARM", "measure_routed"]

ROUTED_ARM = "routed"
"""The arm's name in ``[evaluation] arms``."""
_ENTRY = "routed-adapter"


def measure_routed(model: Any, ctx: Any, ev: Any) -> dict[str, Any]:
    """The routed figures of the arm's trained adapter (the arm's ``model``, adapter ``default``).

    Args:
        model: the arm's PEFT model after its last generation; given back with only ``default`` on it.
        ctx: the seed's :class:`~replaybank.llm.eval.measure.EvalContext` (data, suite, tokenizer).
        ev: the ``[evaluation]`` section (generation settings).

    Returns:
        ``{"suite"`` (the routed answers' summary, the shape of the other arms' ``suite``),
        ``"domain"`` (exact match, the mean over the generations as the other arms'), ``"accuracy"`` (per
        generation), ``"routing"`` (shares of requests routed to the adapter and to the base), and
        ``"router"`` (its calibrated ``top_k``, ``threshold`` and left-one-out shares)``}``.

    Raises:
        EmptyLibraryError: the arm has no domain training prompt to route by.
    """
    from replaybank.llm.adapters.compare import measure_approach
    from replaybank.llm.adapters.library import AdapterLibrary, Registration
    from replaybank.llm.adapters.route import Router
    from replaybank.llm.data.selfsynth import load_prompt_pool

    examples = [str(r["prompt"]) for recs in ctx.data.domain_train_records for r in recs if isinstance(r.get("prompt"), str)]
    requests = [list(recs) for recs in ctx.data.domain_eval_records]
    with tempfile.TemporaryDirectory(prefix="replaybank-routed-") as scratch:
        lib = AdapterLibrary(Path(scratch) / "library", create=True)
        lib.add(model, Registration(_ENTRY, skill="the arm's domain", examples=examples), base_model=model)
        router = Router.calibrated({_ENTRY: lib.manifest(_ENTRY).examples}, load_prompt_pool()[0])
        lib.load(_ENTRY, model)
        try:
            figures = measure_approach(model, ctx.tokenizer, "routed", lambda prompt, g: router.route(prompt),
                                       requests, ctx.suite, ev, [_ENTRY] * len(requests))
        finally:
            model.set_adapter("default")
            model.delete_adapter(_ENTRY)
    own, base = router.leave_one_out()
    accuracy = figures["accuracy"]
    return {
        "suite": figures["suite"],
        "domain": {"exact_match": sum(accuracy) / len(accuracy), "call_score": None, "n": sum(map(len, requests))},
        "accuracy": figures["accuracy"], "routing": figures["routing"],
        "router": {"top_k": router.top_k, "threshold": router.threshold, "leave_one_out_own": own, "leave_one_out_base": base},
    }
