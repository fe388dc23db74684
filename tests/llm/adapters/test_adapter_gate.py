"""The registration gate: measured figures against a retention floor, into the manifest."""

from __future__ import annotations

import pytest

from replaybank.llm.adapters import GateError, Registration, gate

from .conftest import inputs, make_adapter, make_base, snapshot  # type: ignore[import-not-found]

torch = pytest.importorskip("torch")


def _stub(retention, domain=0.5, seen=None):
    """A measurement with constructed figures; records what the model answered (is the adapter on?)."""

    def measure(model):
        if seen is not None:
            with torch.no_grad():
                seen.append(model(inputs()))
        return {"retention": retention, "domain": domain, "per_family": {"arithmetic": retention}, "n": 12}

    return measure


def test_an_adapter_at_or_above_the_floor_is_registered_with_its_figures(lib):
    seen = []
    model = make_adapter()
    m = lib.add(model, Registration("tools", skill="s"), base_model=make_base(), measure=_stub(0.93, seen=seen), floor=0.9)
    assert m.figures == {"retention": 0.93, "domain": 0.5, "per_family": {"arithmetic": 0.93}, "n": 12,
                         "floor": 0.9, "passed": True, "forced": False}
    assert lib.index()["tools"]["retention"] == 0.93
    with torch.no_grad():  # the measurement saw the candidate adapter, not the bare base
        assert torch.allclose(seen[0], model(inputs()), atol=1e-6)
    assert lib.add(make_adapter(seed=2), Registration("edge", skill="s"), base_model=make_base(), measure=_stub(0.9), floor=0.9).figures["passed"]


def test_below_the_floor_is_refused_and_the_library_unchanged(lib):
    lib.add(make_adapter(), Registration("kept", skill="s"), base_model=make_base(), measure=_stub(0.95), floor=0.9)
    before = snapshot(lib.root)
    base = make_base()
    with pytest.raises(GateError, match=r"adapter 'tools', field 'figures.retention': retention 84.0% is below the floor 90.0%"):
        lib.add(make_adapter(seed=3), Registration("tools", skill="s"), base_model=base, measure=_stub(0.84), floor=0.9)
    assert snapshot(lib.root) == before and lib.names() == ["kept"]
    assert not any("lora" in n for n, _ in base.named_modules())  # the candidate was taken off the base again


def test_force_registers_below_the_floor_and_says_so(lib):
    m = lib.add(make_adapter(), Registration("tools", skill="s"), base_model=make_base(), measure=_stub(0.5), floor=0.9, force=True)
    assert m.figures["passed"] is False and m.figures["forced"] is True and m.figures["retention"] == 0.5


def test_figures_measured_elsewhere_go_through_the_same_gate(lib):
    with pytest.raises(GateError, match=r"field 'figures.retention': retention 70.0% is below"):
        lib.add(make_adapter(), Registration("a", skill="s", fingerprint="f" * 64, figures={"retention": 0.7}), floor=0.8)
    with pytest.raises(GateError, match=r"field 'figures.retention': no retention was measured"):
        lib.add(make_adapter(), Registration("a", skill="s", fingerprint="f" * 64), floor=0.8)
    m = lib.add(make_adapter(), Registration("a", skill="s", fingerprint="f" * 64, figures={"retention": 0.85, "domain": 0.4}))
    assert m.figures["floor"] is None and m.figures["passed"] is None and m.figures["domain"] == 0.4


@pytest.mark.parametrize(("measured", "match"), [
    ({"retention": float("nan")}, r"field 'figures.retention': the measurement returned nan"),
    ({"retention": True}, r"field 'figures.retention'"),
    ({"retention": 0.9, "accuracy": 1.0}, r"field 'figures.accuracy': the measurement returned unknown keys"),
])
def test_figures_that_are_not_numbers_are_refused(measured, match):
    with pytest.raises(GateError, match=r"adapter 'x', " + match):
        gate("x", measured, floor=0.5)


def test_a_floor_that_is_not_a_fraction_is_refused():
    with pytest.raises(GateError, match=r"field 'floor': floor '0.9' is not a fraction"):
        gate("x", {"retention": 0.95}, floor="0.9")  # type: ignore[arg-type]
