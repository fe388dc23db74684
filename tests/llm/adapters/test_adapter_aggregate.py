"""The adapters of one skill trained by different learners merged
with equal weights (replaybank.llm.adapters.merge.aggregate), against hand computations of PEFT's
merges, the manifest it registers, and the errors."""

from __future__ import annotations

import math

import pytest

from replaybank.llm.adapters import (
    AdapterNotFoundError,
    FingerprintError,
    MergeError,
    Registration,
    aggregate,
)
from replaybank.llm.adapters.merge import aggregate_weights

from .conftest import delta, make_adapter, make_base  # type: ignore[import-not-found]

torch = pytest.importorskip("torch")


def _learner(lib, name, seed, skill="tool calls", examples=("call the api",), **kwargs):
    model = make_adapter(2, seed)
    lib.add(model, Registration(name, skill=skill, examples=list(examples), **kwargs), base_model=make_base())
    return model


def _applied_delta(lib, name):
    """The adapter's delta W as the loaded model applies it: f(x) - base(x) = x @ delta^T."""
    model = lib.load(name, make_base())
    eye = torch.eye(6)
    with torch.no_grad():
        return (model(eye) - make_base()(eye)).T


def _lora(model):
    layer = model.base_model.model.proj
    return layer.lora_A["default"].weight.detach(), layer.lora_B["default"].weight.detach(), layer.scaling["default"]


def test_linear_aggregate_is_peft_linear_with_weights_one_half(lib):
    a, b = _learner(lib, "seed0", 1), _learner(lib, "seed1", 2)
    m = aggregate(lib, "tool calls", into="avg", base_model=make_base())
    (a_a, b_a, s_a), (a_b, b_b, s_b) = _lora(a), _lora(b)
    ca, cb = math.sqrt(0.5 * s_a), math.sqrt(0.5 * s_b)
    expected = (ca * b_a + cb * b_b) @ (ca * a_a + cb * a_b)  # the merged adapter's scaling is 1
    assert torch.allclose(_applied_delta(lib, "avg"), expected, atol=1e-5)
    assert m.merge == {"combination_type": "linear", "weights": [0.5, 0.5], "density": None, "svd_rank": None}
    # the mean of the deltas plus the cross terms (B_a A_b + B_b A_a) / 2
    cross = 0.5 * s_a * (b_a @ a_b + b_b @ a_a)
    assert torch.allclose(expected, 0.5 * (delta(a) + delta(b)) + cross, atol=1e-5)


def test_cat_aggregate_is_exactly_the_mean_of_the_learners_deltas(lib):
    a, b, c = _learner(lib, "seed0", 1), _learner(lib, "seed1", 2), _learner(lib, "seed2", 3)
    m = aggregate(lib, "tool calls", into="avg", base_model=make_base(), combination_type="cat")
    assert m.merge["weights"] == pytest.approx([1 / 3] * 3)
    assert torch.allclose(_applied_delta(lib, "avg"), (delta(a) + delta(b) + delta(c)) / 3, atol=1e-5)


def test_ties_aggregate_weighs_each_learner_one_the_disjoint_mean_does_the_averaging(lib):
    a, b = _learner(lib, "seed0", 1), _learner(lib, "seed1", 2)
    with pytest.warns(UserWarning, match=r"density 1\.0 .* no pruning will be performed"):  # the expected delta below relies on it
        m = aggregate(lib, "tool calls", into="ties", base_model=make_base(), combination_type="ties", density=1.0)
    assert m.merge["weights"] == [1.0, 1.0] and m.merge["density"] == 1.0
    (a_a, b_a, s), (a_b, b_b, _) = _lora(a), _lora(b)

    def disjoint_mean(x, y):  # TIES at density 1: the mean over the entries that agree with the sign of the sum
        stack = torch.stack([x, y])
        agree = stack.sign() == torch.where(stack.sum(0) >= 0, 1.0, -1.0)
        return (stack * agree).sum(0) / agree.sum(0).clamp(min=1)

    expected = s * disjoint_mean(b_a, b_b) @ disjoint_mean(a_a, a_b)  # sqrt(1 * s) on A and on B
    assert torch.allclose(_applied_delta(lib, "ties"), expected, atol=1e-5)
    assert aggregate_weights(4, "dare_ties") == [1.0] * 4 and aggregate_weights(4, "svd") == [0.25] * 4


def test_the_aggregate_is_registered_for_the_skill_with_the_learners_examples_and_data(lib):
    _learner(lib, "seed0", 1, examples=["call the api", "list the tools"], domain="toolapi", data={"rows": 96, "seed": 1})
    _learner(lib, "seed1", 2, examples=["list the tools", "ping the server"], domain="toolapi", data={"rows": 96, "seed": 2})
    _learner(lib, "other", 3, skill="agenda", examples=["book a meeting"])
    m = aggregate(lib, "tool calls", into="avg", base_model=make_base())
    assert m.skill == "tool calls" and m.parents == ("seed0", "seed1") and m.domain == "toolapi"
    assert m.examples == ("call the api", "list the tools", "ping the server")  # concatenated, repeats dropped
    assert m.data["aggregate"] == {"skill": "tool calls", "parents": ["seed0", "seed1"]}
    assert m.data["parents"]["seed1"]["data"] == {"rows": 96, "seed": 2}
    assert m.data["parents"]["seed0"]["sha256"] == lib.manifest("seed0").sha256
    assert lib.index()["avg"]["skill"] == "tool calls" and lib.manifest("avg") == m
    # a second aggregate of the skill takes the learners, not the first aggregate
    again = aggregate(lib, "tool calls", into="avg-cat", base_model=make_base(), combination_type="cat")
    assert again.parents == ("seed0", "seed1")
    picked = aggregate(lib, "tool calls", into="pair", base_model=make_base(), names=["seed1", "avg"])
    assert picked.parents == ("seed1", "avg")  # explicit names: exactly those


def test_fewer_than_two_learners_and_an_unknown_skill_are_refused(lib):
    _learner(lib, "seed0", 1)
    _learner(lib, "other", 2, skill="agenda")
    with pytest.raises(MergeError, match=r"adapter 'seed0', field 'skill': aggregating skill 'tool calls' needs at "
                                         r"least 2 of its adapters \(learners\), got 1: seed0"):
        aggregate(lib, "tool calls", into="avg", base_model=make_base())
    with pytest.raises(AdapterNotFoundError, match=r"field 'skill': .*no adapter has skill 'ledger' "
                                                   r"\(skills: 'agenda', 'tool calls'\)"):
        aggregate(lib, "ledger", into="avg", base_model=make_base())
    with pytest.raises(MergeError, match=r"adapter 'other', field 'skill': registered with skill 'agenda', not 'tool calls'"):
        aggregate(lib, "tool calls", into="avg", base_model=make_base(), names=["seed0", "other"])
    assert lib.names() == ["other", "seed0"]


def test_learners_of_different_base_models_are_refused(lib):
    _learner(lib, "seed0", 1)
    lib.add(make_adapter(2, 2), Registration("alien", skill="tool calls", fingerprint="f" * 64))
    with pytest.raises(FingerprintError, match=r"field 'base_model.fingerprint': adapters of different base models"):
        aggregate(lib, "tool calls", into="avg", base_model=make_base())
    assert "avg" not in lib.names()
