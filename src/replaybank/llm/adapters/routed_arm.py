"""The ``routed`` arm of the main job: its adapter behind the library's router, the base model as fallback.

The arm trains as ``naive`` does (domain rows alone, the LoRA loop); then :func:`measure_routed`
registers the trained adapter in a scratch :class:`~.library.AdapterLibrary` (the arm's domain
training prompts as its examples), calibrates :meth:`~.route.Router.calibrated` on those examples
and the shipped general prompt pool (standing for the base model), loads the registered copy
back onto the arm's model (:meth:`~.library.AdapterLibrary.load`: hash and base fingerprint
checked) and measures with the adapter comparison's :func:`~.compare.measure_approach`: every
suite item and every held-out domain request goes to the adapter or to the bare base model as
the router decides. With ``[output] save_adapters`` the library is kept in the run's folder
(``adapters/routed/seed<N>/library``), so the arm as measured can be served again:
``replaybank adapters route LIBRARY PROMPT --top-k K --threshold T`` with the ``router`` figures of
``seeds/seed<N>.json``, or ``--background builtin --calibrate``, which chooses them again the same way.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

__all__ = ["ENTRY", "ROUTED_ARM", "measure_routed"]

ROUTED_ARM = "routed"
"""The arm's name in ``[evaluation] arms``."""
ENTRY = "domain"
"""The adapter's name in the arm's library."""


def measure_routed(model: Any, ctx: Any, ev: Any, library: Path | None = None) -> dict[str, Any]:
    """The routed figures of the arm's trained adapter (the arm's ``model``, adapter ``default``).

    Args:
        model: the arm's PEFT model after its last generation; given back with only ``default`` on it.
        ctx: the seed's :class:`~replaybank.llm.eval.measure.EvalContext` (data, suite, tokenizer).
        ev: the ``[evaluation]`` section (generation settings).
        library: an empty folder to keep the arm's adapter library in (the adapter registered as
            :data:`ENTRY` with its routing examples); ``None``: a scratch folder, deleted after.

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
        lib = AdapterLibrary(library if library is not None else Path(scratch) / "library", create=True)
        if ENTRY in lib.names():  # kept by an attempt that stopped before the seed was written
            lib.remove(ENTRY)
        lib.add(model, Registration(ENTRY, skill="the arm's domain", examples=examples), base_model=model)
        router = Router.calibrated({ENTRY: lib.manifest(ENTRY).examples}, load_prompt_pool()[0])
        lib.load(ENTRY, model)
        try:
            figures = measure_approach(model, ctx.tokenizer, "routed", lambda prompt, g: router.route(prompt),
                                       requests, ctx.suite, ev, [ENTRY] * len(requests))
        finally:
            model.set_adapter("default")
            model.delete_adapter(ENTRY)
    own, base = router.leave_one_out()
    accuracy = figures["accuracy"]
    return {
        "suite": figures["suite"],
        "domain": {"exact_match": sum(accuracy) / len(accuracy), "call_score": None, "n": sum(map(len, requests))},
        "accuracy": figures["accuracy"], "routing": figures["routing"],
        "router": {"top_k": router.top_k, "threshold": router.threshold, "leave_one_out_own": own, "leave_one_out_base": base},
    }
