"""Merging library adapters (PEFT add_weighted_adapter) against a hand computation of
delta W = s * B @ A, and the errors for what cannot be merged."""

from __future__ import annotations

import math

import pytest

from replaybank.llm.adapters import FingerprintError, MergeError, Registration, merge

from .conftest import delta, inputs, make_adapter, make_base  # type: ignore[import-not-found]

torch = pytest.importorskip("torch")


def _register(lib, name, rank, seed, alpha=4.0):
    model = make_adapter(rank, seed, alpha)
    lib.add(model, Registration(name, skill=name, examples=[f"do {name}"]), base_model=make_base())
    return model


def _merged_delta(lib, name):
    """The merged adapter's delta W as the loaded model applies it: (f(x) - base(x)) = x @ delta^T."""
    model = lib.load(name, make_base())
    eye = torch.eye(6)
    with torch.no_grad():
        return (model(eye) - make_base()(eye)).T


def test_cat_is_the_weighted_sum_of_the_deltas_even_for_different_ranks(lib):
    a, b = _register(lib, "ada", 2, 1), _register(lib, "bob", 3, 2, alpha=6.0)
    m = merge(lib, ["ada", "bob"], into="ab", base_model=make_base(), weights=[0.7, 0.3], combination_type="cat")
    expected = 0.7 * delta(a) + 0.3 * delta(b)
    assert torch.allclose(_merged_delta(lib, "ab"), expected, atol=1e-5)
    assert lib.adapter_config("ab")["r"] == 5 and m.parents == ("ada", "bob")
    assert m.merge == {"combination_type": "cat", "weights": [0.7, 0.3], "density": None, "svd_rank": None}
    assert m.skill == "ada+bob" and m.examples == ("do ada", "do bob") and m.fingerprint == lib.manifest("ada").fingerprint


def test_linear_combines_a_and_b_separately_as_peft_documents(lib):
    a, b = _register(lib, "ada", 2, 1), _register(lib, "bob", 2, 2)
    merge(lib, ["ada", "bob"], into="ab", base_model=make_base(), weights=[0.7, 0.3], combination_type="linear")
    la, lb = a.base_model.model.proj, b.base_model.model.proj
    ca, cb = math.sqrt(0.7 * la.scaling["default"]), math.sqrt(0.3 * lb.scaling["default"])
    big_a = ca * la.lora_A["default"].weight + cb * lb.lora_A["default"].weight
    big_b = ca * la.lora_B["default"].weight + cb * lb.lora_B["default"].weight
    expected = (big_b @ big_a).detach()  # scaling of the merged adapter: lora_alpha = r, so 1
    assert torch.allclose(_merged_delta(lib, "ab"), expected, atol=1e-5)
    # and that is not the weighted sum of the deltas (cross terms B_a A_b)
    assert not torch.allclose(expected, 0.7 * delta(a) + 0.3 * delta(b), atol=1e-3)


def test_svd_at_full_rank_equals_the_weighted_sum(lib):
    a, b = _register(lib, "ada", 2, 1), _register(lib, "bob", 2, 2)
    merge(lib, ["ada", "bob"], into="svd", base_model=make_base(), weights=[0.5, 0.5], combination_type="svd", svd_rank=4)
    assert torch.allclose(_merged_delta(lib, "svd"), 0.5 * delta(a) + 0.5 * delta(b), atol=1e-4)


def test_ties_and_dare_ties_merge_with_a_density_and_dare_is_seeded(lib):
    _register(lib, "ada", 2, 1), _register(lib, "bob", 2, 2)
    base = make_base()
    before = base(inputs()).detach()
    ties = merge(lib, ["ada", "bob"], into="ties", base_model=base, weights=[1.0, 1.0], combination_type="ties", density=0.5)
    d1 = merge(lib, ["ada", "bob"], into="dare1", base_model=base, combination_type="dare_ties", density=0.5, seed=3)
    d2 = merge(lib, ["ada", "bob"], into="dare2", base_model=base, combination_type="dare_ties", density=0.5, seed=3)
    assert d1.sha256 == d2.sha256 and ties.merge["density"] == 0.5
    assert torch.isfinite(_merged_delta(lib, "ties")).all() and _merged_delta(lib, "dare1").abs().sum() > 0
    assert torch.equal(base(inputs()).detach(), before) and not any("lora" in n for n, _ in base.named_modules())


def test_ranks_a_type_cannot_combine_are_refused_naming_the_adapters(lib):
    _register(lib, "small", 2, 1), _register(lib, "big", 4, 2)
    for kind in ("linear", "ties", "dare_ties"):
        with pytest.raises(MergeError, match=rf"adapter 'small, big', field 'r': combination type '{kind}' needs adapters "
                                             r"of one rank, got small: r=2, big: r=4; use 'cat' or 'svd'"):
            merge(lib, ["small", "big"], into="x", base_model=make_base(), combination_type=kind, density=0.5)
    assert lib.names() == ["big", "small"]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"combination_type": "average"}, r"field 'combination_type': unknown combination type 'average'"),
    ({"combination_type": "ties"}, r"field 'density': combination type 'ties' needs density in \(0, 1\], got None"),
    ({"weights": [1.0]}, r"field 'weights': expected 2 finite weights"),
    ({"weights": [1.0, float("inf")]}, r"field 'weights'"),
])
def test_bad_merge_arguments(lib, kwargs, match):
    _register(lib, "ada", 2, 1), _register(lib, "bob", 2, 2)
    with pytest.raises(MergeError, match=r"adapter 'ada, bob', " + match):
        merge(lib, ["ada", "bob"], into="x", base_model=make_base(), **kwargs)


def test_adapters_of_different_base_models_are_not_merged(lib):
    _register(lib, "ada", 2, 1)
    lib.add(make_adapter(2, 2), Registration("alien", skill="s", fingerprint="f" * 64))
    with pytest.raises(FingerprintError, match=r"adapter 'ada, alien', field 'base_model.fingerprint': adapters of different base"):
        merge(lib, ["ada", "alien"], into="x", base_model=make_base(), combination_type="cat")
