"""Routing each request to an adapter (BM25 over registered example prompts) with a
fallback to the bare base model; the routed adapter really answers; PEFT Arrow from the library."""

from __future__ import annotations

import pytest

from replaybank.llm.adapters import (
    AdapterLibrary,
    EmptyLibraryError,
    LibraryError,
    Registration,
    Router,
    load_all,
    routed,
)

from .conftest import inputs, make_adapter, make_base  # type: ignore[import-not-found]

torch = pytest.importorskip("torch")

EXAMPLES = {
    "cart": ["Add 3 eggs to my cart.", "Put two bags of rice in the shopping cart.", "Remove milk from my cart."],
    "weather": ["What is the forecast for Oslo tomorrow?", "Will it rain in Lima today?", "Weather in Paris this weekend."],
    "timer": ["Set a timer for 5 minutes.", "Start a 90 second countdown timer.", "Cancel my tea timer."],
}


@pytest.mark.parametrize(("prompt", "adapter"), [
    ("Add a box of tea to my cart", "cart"),
    ("Please put 4 apples in the shopping cart", "cart"),
    ("What's the forecast for Rome tomorrow?", "weather"),
    ("Will it rain in Oslo this weekend?", "weather"),
    ("Set a 10 minutes timer", "timer"),
    ("Write a haiku about autumn leaves.", None),   # general requests go to the base model
    ("Explain photosynthesis simply.", None),
    ("What is 17 times 23?", None),
    ("What is the capital of France?", None),   # shares only "what is the" with a weather example
    ("How do I set up a Python virtual environment?", None),
])
def test_constructed_prompts_go_where_they_belong(prompt, adapter):
    r = Router(EXAMPLES, threshold=0.3).route(prompt)
    assert r.adapter == adapter, (r.best, r.confidences)
    assert r.fallback == (adapter is None)


def test_the_threshold_decides_the_fallback():
    prompt = "Add a box of tea to my cart"
    low, high = Router(EXAMPLES, threshold=0.05).route(prompt), Router(EXAMPLES, threshold=1.0).route(prompt)
    assert low.adapter == "cart" and high.adapter is None and high.best == "cart"
    assert low.confidence == high.confidence and 0 < low.confidence < 1.5
    same = Router(EXAMPLES).route("Add 3 eggs to my cart.")  # an example itself: confidence 1
    assert same.adapter == "cart" and same.confidence == pytest.approx(1.0)


LIST_SHOP = {"shop": ["Add 2 eggs to my shopping list.", "Put rice on the shopping list.", "Add 3 pears to my list.",
                      "Remove milk from my shopping list."],
             "diary": ["Block Tuesday morning for the roadmap.", "Log 40 minutes of chess on Sunday.",
                       "Block Friday afternoon for hiring."]}
GENERAL = ["List three colours as a numbered list.", "List four animals as a numbered list.", "What is 8 + 5?",
           "Name three rivers in Europe.", "Write a Python function that returns the sum of a list."]


def test_background_prompts_keep_general_requests_on_the_base_model():
    request = "List three fruits as a numbered list."   # shares "list" with the shop's examples only
    plain = Router(LIST_SHOP, threshold=0.2).route(request)
    assert plain.adapter == "shop"                      # without a background, one shared word carries it
    with_bg = Router(LIST_SHOP, threshold=0.2, background=GENERAL).route(request)
    assert with_bg.adapter is None and with_bg.best == "shop" and with_bg.fallback
    assert "(base)" not in with_bg.confidences          # the background is not an adapter
    kept = Router(LIST_SHOP, threshold=0.2, background=GENERAL).route("Add 4 apples to my shopping list.")
    assert kept.adapter == "shop"


def test_a_request_the_background_matches_at_least_as_well_goes_to_the_base_even_above_the_threshold():
    # the threshold (0.05) lets the shop adapter take each request; only the background rule sends it to the base
    router = Router(LIST_SHOP, threshold=0.05, background=GENERAL)
    general = router.route("List three fruits as a numbered list.")
    assert general.confidence >= router.threshold and general.best == "shop"
    assert general.adapter is None and general.fallback
    # a tie: a background prompt worded exactly as a shop example matches as well as the shop does (confidence 1)
    request = "Add 2 eggs to my shopping list."
    assert router.route(request).adapter == "shop"
    tied = Router(LIST_SHOP, threshold=0.05, background=[*GENERAL, request]).route(request)
    assert tied.confidence == pytest.approx(1.0) and tied.best == "shop" and tied.adapter is None


def test_top_k_scores_an_adapter_by_its_best_examples_together():
    # one shop example shares "Tuesday" with the request; three diary examples share "block"/"morning"
    ex = {"shop": ["Deliver eggs on Tuesday.", "Add rice to my list.", "Add pears to my list."],
          "diary": ["Block Monday morning for reading.", "Block Friday morning for hiring.", "Block the morning for calls."]}
    request = "Block Tuesday morning"
    one, three = Router(ex, top_k=1, threshold=0.0).route(request), Router(ex, top_k=3, threshold=0.0).route(request)
    assert three.adapter == "diary"
    assert three.confidences["diary"] > three.confidences["shop"]
    assert one.confidences["shop"] > three.confidences["shop"]   # a lone match is diluted by the other two


def test_calibration_picks_the_setting_that_routes_the_examples_best_left_one_out():
    router = Router.calibrated(LIST_SHOP, GENERAL, top_ks=(1, 2), thresholds=(0.05, 0.3, 0.9))
    own, base = router.leave_one_out()
    for k in (1, 2):
        for t in (0.05, 0.3, 0.9):
            o, b = Router(LIST_SHOP, top_k=k, threshold=t, background=GENERAL).leave_one_out()
            assert (o + b) / 2 <= (own + base) / 2 + 1e-12
    assert Router(LIST_SHOP, threshold=1.0, background=GENERAL).leave_one_out() == (0.0, 1.0)
    with pytest.raises(LibraryError, match=r"field 'top_k'"):
        Router(EXAMPLES, top_k=0)
    with pytest.raises(LibraryError, match=r"field 'adapters'.*background"):
        Router({"(base)": ["x"]})


def test_an_empty_library_or_no_examples_is_a_clear_error(lib):
    with pytest.raises(EmptyLibraryError, match=r"field 'adapters': .*the library holds no adapter to route to"):
        Router.from_library(lib)
    lib.add(make_adapter(), Registration("plain", skill="s", fingerprint="f" * 64))
    with pytest.raises(EmptyLibraryError, match=r"field 'examples': none of the adapters \['plain'\] has example prompts"):
        Router.from_library(lib)
    with pytest.raises(LibraryError, match=r"field 'threshold'"):
        Router(EXAMPLES, threshold=-1)


def test_the_routed_adapter_answers_and_the_fallback_is_the_base(lib):
    models = {name: make_adapter(rank=2, seed=k + 1) for k, name in enumerate(EXAMPLES)}
    for name, model in models.items():
        lib.add(model, Registration(name, skill=name, examples=EXAMPLES[name]), base_model=make_base())
    router = Router.from_library(lib)
    served = load_all(lib, make_base())
    x = inputs()
    with torch.no_grad():
        for prompt, want in [("Add tea to my cart", "cart"), ("Forecast for Oslo?", "weather"),
                             ("Set a timer for 3 minutes", "timer"), ("Tell me a joke.", None)]:
            route = router.route(prompt)
            assert route.adapter == want
            with routed(served, route) as m:
                got = m(x)
            expected = models[want](x) if want else make_base()(x)
            assert torch.allclose(got, expected, atol=1e-6), prompt


def test_arrow_routing_over_library_adapters(lib):
    from replaybank.llm.adapters import arrow_model

    for k, name in enumerate(EXAMPLES):
        lib.add(make_adapter(rank=2, seed=k + 1), Registration(name, skill=name), base_model=make_base())
    model = arrow_model(lib, make_base(), top_k=2)
    with torch.no_grad():
        out = model(inputs())
        assert out.shape == (7, 5) and torch.isfinite(out).all()
        assert not torch.allclose(out, make_base()(inputs()), atol=1e-4)
    assert model.active_adapter == "arrow_router"
    empty = AdapterLibrary(lib.root.parent / "empty", create=True)
    with pytest.raises(EmptyLibraryError):
        arrow_model(empty, make_base())
