"""Choosing an adapter per request, with a fallback to the bare base model.

:class:`Router` is replaybank's router: Okapi BM25 (the episodic store's,
:class:`replaybank.episodic.retrieval.BM25`) over every adapter's registered example prompts. A
request's score for an adapter is its best example's BM25 score (English function words, :data:`STOPWORDS`,
left out of requests and examples alike: on a few examples per adapter, "what is the" would
otherwise carry a general question to whichever adapter has a question among its examples); its **confidence** is that score
over the score the same example gets as a query for itself (about 1 for a request worded like the
example, 0 with no word in common), so one threshold means the same thing whatever the library's
size. Below ``threshold`` the request goes to the bare base model (``adapter`` None): general
requests keep the base model's answers. Ties go to the adapter first in name order.

Two refinements, both off by default: ``top_k`` scores an adapter by the mean of its ``top_k`` best
examples (one example sharing a name or the word "list" with a request does not decide alone),
and ``background`` prompts (general requests, e.g. the shipped self-synthesis pool) stand for the
base model: a request they match at least as well as the best adapter goes to the base.
:meth:`Router.calibrated` picks ``top_k`` and ``threshold`` by routing the registered examples and
the background left-one-out, so the setting comes from the library, not from the requests served.

:func:`load_all` puts every adapter onto one base model under its name, and :func:`routed` runs a
block with the routed adapter active (or all of them disabled). :func:`arrow_model` builds PEFT's
Arrow (per-token routing among the adapters inside the model) from library entries.

Example:
    >>> r = Router({"cart": ["Add 3 eggs to my cart."], "weather": ["Forecast for Oslo tomorrow."]}, threshold=0.3)
    >>> r.route("Add two apples to the cart").adapter, r.route("Forecast for Lima").adapter
    ('cart', 'weather')
    >>> d = r.route("Write a haiku about autumn"); d.adapter, d.fallback
    (None, True)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybank.episodic.retrieval import BM25, tokenize
from replaybank.llm.adapters.attach import check_config_fits
from replaybank.llm.adapters.errors import EmptyLibraryError, LibraryError
from replaybank.llm.adapters.library import AdapterLibrary, name_list

__all__ = ["BACKGROUND", "STOPWORDS", "Route", "Router", "arrow_model", "check_threshold", "load_all", "routed"]

STOPWORDS = frozenset("""
a an the and or but if then so of to in on at by for from with about into over under as is are was were be been
being am do does did doing have has had having i me my mine you your yours we us our they them their he him his
she her it its this that these those what which who whom whose when where why how can could would should will
shall may might must please not no yes just up out there here some any all also too very s t d ll m re ve
""".split())


#: the name the background prompts (general requests that belong to the base model) go under
BACKGROUND = "(base)"


def check_threshold(value: Any, field: str) -> float:
    """``value`` as a confidence threshold: a number in ``[0, 1]`` (a bool, NaN, 5 or inf refused).

    Raises:
        LibraryError: naming ``field``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise LibraryError(f"{field} {value!r} is not a confidence in [0, 1] (1: a request worded like an example)",
                           field=field)
    return float(value)


def _content(text: str) -> str:
    """``text``'s words without :data:`STOPWORDS` (what the router scores)."""
    return " ".join(w for w in tokenize(text) if w not in STOPWORDS)


@dataclass(frozen=True)
class Route:
    """Where one request goes: ``adapter`` (None: the bare base model), the best adapter's
    ``confidence`` and raw BM25 ``score``, and every adapter's confidence."""

    adapter: str | None
    confidence: float
    score: float
    best: str
    confidences: dict[str, float]

    @property
    def fallback(self) -> bool:
        return self.adapter is None


class Router:
    """BM25 over example prompts ``{adapter: [prompt, ...]}``; see the module doc.

    ``threshold`` is a confidence, so in ``[0, 1]``: 1 asks for a request worded like an example,
    and above 1 (or infinite) nearly every request would go to the base model.

    Raises:
        EmptyLibraryError: no adapter, or no adapter with an example prompt.
        LibraryError: a threshold that is not a number in [0, 1], a ``top_k`` that is not an
            integer >= 1, example prompts or background given as one string (not a list), naming
            the parameter.
    """

    def __init__(self, examples: Mapping[str, Sequence[str]], *, threshold: float = 0.3, top_k: int = 1,
                 background: Sequence[str] = ()) -> None:
        if not isinstance(examples, Mapping):
            raise LibraryError(f"examples must be a mapping {{adapter: [prompt, ...]}}, got {type(examples).__name__}",
                               field="examples")
        if not examples:
            raise EmptyLibraryError("no adapter to route to (register adapters with example prompts)", field="adapters")
        check_threshold(threshold, "threshold")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise LibraryError(f"top_k {top_k!r} is not an integer >= 1", field="top_k")
        if BACKGROUND in examples:
            raise LibraryError(f"{BACKGROUND!r} names the background prompts; rename that adapter", field="adapters")
        for name, texts in examples.items():
            if isinstance(texts, (str, bytes)) or not all(isinstance(t, str) for t in texts):
                raise LibraryError(f"the example prompts must be a list of strings, got {texts!r}", adapter=str(name),
                                   field="examples")
        if isinstance(background, (str, bytes)) or not all(isinstance(t, str) for t in background):
            raise LibraryError("background must be a list of prompts, not one string", field="background")
        self.threshold, self.top_k = float(threshold), top_k
        self.adapters = sorted(examples)
        self._docs = [(name, text) for name in self.adapters for text in examples[name]]
        if not self._docs:
            raise EmptyLibraryError(f"none of the adapters {self.adapters} has example prompts to route by "
                                    "(add them with examples= / --examples)", field="examples")
        self._docs += [(BACKGROUND, text) for text in background]
        self._bm25 = BM25([_content(text) for _, text in self._docs])
        # each example's score as a query for itself: the confidence's denominator
        self._self = np.array([max(float(self._bm25.scores(_content(text))[k]), 1e-12)
                               for k, (_, text) in enumerate(self._docs)])
        self._owner = np.array([name for name, _ in self._docs])

    @classmethod
    def from_library(cls, library: AdapterLibrary, *, threshold: float = 0.3, top_k: int = 1,
                     background: Sequence[str] = (), names: Sequence[str] | None = None) -> Router:
        """A router over ``names`` (default: every adapter) and their manifests' example prompts.

        Raises:
            EmptyLibraryError: the library holds no adapter (or none has example prompts).
            LibraryError: ``names`` given as one string.
        """
        names = name_list(names, "names") if names is not None else library.names()
        if not names:
            raise EmptyLibraryError(f"{library.root}: the library holds no adapter to route to", field="adapters")
        return cls({n: library.manifest(n).examples for n in names}, threshold=threshold, top_k=top_k,
                   background=background)

    def _confidences(self, ratios: np.ndarray, skip: int | None = None) -> dict[str, float]:
        """Per adapter (and the background) the mean of its ``top_k`` best examples' ratios."""
        out = {}
        for name in [*self.adapters, BACKGROUND]:
            mine = ratios[(self._owner == name) & (np.arange(len(ratios)) != (-1 if skip is None else skip))]
            out[name] = float(np.sort(mine)[::-1][: self.top_k].mean()) if mine.size else 0.0
        return out

    def _decide(self, conf: dict[str, float]) -> tuple[str | None, str]:
        best = max(self.adapters, key=lambda n: (conf[n], -self.adapters.index(n)))
        confident = conf[best] >= self.threshold and conf[best] > 0 and conf[best] > conf[BACKGROUND]
        return (best if confident else None), best

    def route(self, prompt: str) -> Route:
        """The adapter for ``prompt``, or the base model when no adapter is confident enough (or the
        background prompts match it at least as well)."""
        scores = self._bm25.scores(_content(prompt))
        conf = self._confidences(scores / self._self)
        chosen, best = self._decide(conf)
        raw = float(scores[self._owner == best].max())
        return Route(adapter=chosen, confidence=conf[best], score=raw, best=best,
                     confidences={n: conf[n] for n in self.adapters})

    def leave_one_out(self) -> tuple[float, float]:
        """Each example routed by the others: the share of adapter examples sent to their own
        adapter, and the share of background prompts sent to the base (1.0 with none)."""
        own: list[bool] = []
        base: list[bool] = []
        for k, (name, text) in enumerate(self._docs):
            chosen, _ = self._decide(self._confidences(self._bm25.scores(_content(text)) / self._self, skip=k))
            (base if name == BACKGROUND else own).append(chosen == (None if name == BACKGROUND else name))
        return float(np.mean(own)), float(np.mean(base)) if base else 1.0

    @classmethod
    def calibrated(cls, examples: Mapping[str, Sequence[str]], background: Sequence[str], *,
                   top_ks: Sequence[int] = (1, 3, 5), thresholds: Sequence[float] = (0.1, 0.2, 0.3, 0.4)) -> Router:
        """The router whose ``top_k`` and ``threshold`` route the examples and the background best
        left-one-out (the mean of the two shares of :meth:`leave_one_out`; ties to the earlier
        setting): chosen from the registered prompts alone, never from the requests it will serve.

        Raises:
            LibraryError: ``top_ks`` or ``thresholds`` given as one value or holding one out of range.
        """
        for field, values in (("top_ks", top_ks), ("thresholds", thresholds)):
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                raise LibraryError(f"{field} must be a list, got {values!r}", field=field)
        for t in thresholds:
            check_threshold(t, "thresholds")
        best: tuple[float, Router] | None = None
        for k in top_ks:
            for t in thresholds:
                router = cls(examples, threshold=t, top_k=k, background=background)
                score = float(np.mean(router.leave_one_out()))
                if best is None or score > best[0]:
                    best = (score, router)
        if best is None:
            raise LibraryError("calibrated: give at least one top_k and one threshold", field="thresholds")
        return best[1]

    def route_many(self, prompts: Sequence[str]) -> list[Route]:
        return [self.route(p) for p in prompts]


def load_all(library: AdapterLibrary, base_model: Any, names: Sequence[str] | None = None) -> Any:
    """Every adapter (or ``names``) onto ``base_model`` under its own name; returns the PEFT model.

    Raises:
        EmptyLibraryError: nothing to load. LibraryError: ``names`` given as one string.
        FingerprintError, HashMismatchError, ...: see :meth:`AdapterLibrary.load`.
    """
    names = name_list(names, "names") if names is not None else library.names()
    if not names:
        raise EmptyLibraryError(f"{library.root}: the library holds no adapter", field="adapters")
    model = library.load(names[0], base_model)
    for n in names[1:]:
        library.load(n, model)
    return model


@contextmanager
def routed(peft_model: Any, route: Route) -> Iterator[Any]:
    """Run the block with ``route``'s adapter active, or every adapter disabled for a fallback."""
    if route.adapter is None:
        with peft_model.disable_adapter():
            yield peft_model
        return
    before = peft_model.active_adapter
    peft_model.set_adapter(route.adapter)
    try:
        yield peft_model
    finally:
        peft_model.set_adapter(before)


def arrow_model(library: AdapterLibrary, base_model: Any, names: Sequence[str] | None = None, *, top_k: int = 3,
                router_temperature: float = 1.0) -> Any:
    """PEFT's Arrow routing (``create_arrow_model``) over library adapters, each verified first
    (hash, config, base model fingerprint). Arrow needs adapters of one rank on linear layers.

    Raises:
        EmptyLibraryError: nothing to route among. LibraryError: this PEFT has no Arrow, ``names``
            given as one string, ``top_k`` not an integer >= 1, ``router_temperature`` not finite and > 0.
        ManifestError: a config that does not fit ``base_model`` (:func:`~.attach.check_config_fits`).
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise LibraryError(f"top_k {top_k!r} is not an integer >= 1", field="top_k")
    if isinstance(router_temperature, bool) or not isinstance(router_temperature, (int, float)) \
            or not 0 < router_temperature < math.inf:
        raise LibraryError(f"router_temperature {router_temperature!r} is not a finite number > 0", field="router_temperature")
    try:
        from peft import ArrowConfig, create_arrow_model
    except ImportError:
        raise LibraryError("this PEFT has no Arrow (create_arrow_model needs peft >= 0.17)", field="peft") from None
    from replaybank.llm.adapters.errors import FingerprintError
    from replaybank.llm.eval.decode import model_fingerprint

    names = name_list(names, "names") if names is not None else library.names()
    if not names:
        raise EmptyLibraryError(f"{library.root}: the library holds no adapter to route among", field="adapters")
    fingerprint = model_fingerprint(base_model)
    for n in names:
        m = library.verify(n)
        if m.fingerprint != fingerprint:
            raise FingerprintError(f"registered for base model {m.fingerprint[:16]}, not this one ({fingerprint[:16]})",
                                   adapter=n, field="base_model.fingerprint")
        check_config_fits(library.adapter_config(n), base_model, str(library.folder(n) / m.config), n)
    paths = [str(library.folder(n)) for n in names]
    return create_arrow_model(base_model, paths, ArrowConfig(top_k=min(top_k, len(names)), router_temperature=router_temperature),
                              use_safetensors=True)
