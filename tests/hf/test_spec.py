"""MixSpec: the mixing options checked once, each refusal naming its field."""

from __future__ import annotations

import dataclasses

import pytest

from replaybank.hf import MixError, MixSpec


@pytest.mark.parametrize(("options", "field"), [
    ({"ratio": 1.0}, "MixSpec.ratio"),
    ({"ratio": "0.1"}, "MixSpec.ratio"),
    ({"ratio": 0.1, "mix_by": "bytes"}, "MixSpec.mix_by"),
    ({"ratio": 0.1, "batch_size": 0}, "MixSpec.batch_size"),
    ({"ratio": 0.1, "batch_size": 2.0}, "MixSpec.batch_size"),
    ({"ratio": 0.1, "batch_size": None, "global_batch_size": -4}, "MixSpec.global_batch_size"),
    ({"ratio": 0.1, "seed": -1}, "MixSpec.seed"),
    ({"ratio": 0.1, "seed": True}, "MixSpec.seed"),
    ({"ratio": 0.1, "world_size": 0}, "MixSpec.world_size"),
    ({"ratio": 0.1, "world_size": "all"}, "MixSpec.world_size"),
    ({"ratio": 0.1, "rows_per_epoch": 0}, "MixSpec.rows_per_epoch"),
    ({"ratio": 0.1, "epochs": 0}, "MixSpec.epochs"),
])  # fmt: skip
def test_a_bad_option_is_refused_naming_its_field(options, field):
    with pytest.raises(MixError, match=field.replace(".", r"\.")):
        MixSpec(**{"batch_size": 4, "seed": 0, **options})


def test_the_share_and_the_batch_sizes_are_either_or():
    with pytest.raises(MixError, match="give ratio= .* or recipe="):
        MixSpec(batch_size=4, seed=0)
    with pytest.raises(MixError, match="not both"):
        MixSpec(0.1, recipe="self-distill", batch_size=4, seed=0)
    with pytest.raises(MixError, match="exactly one of batch_size"):
        MixSpec(0.1, seed=0)
    with pytest.raises(MixError, match="world size 3 does not divide global_batch_size=16"):
        MixSpec(0.1, global_batch_size=16, world_size=3, seed=0)
    with pytest.raises(TypeError):
        MixSpec(0.1, 4, 0)  # type: ignore[misc]  # only the ratio is positional


def test_a_spec_is_a_value():
    spec = MixSpec(0.1, batch_size=4, seed=0)
    assert spec == MixSpec(0.1, batch_size=4, seed=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 1  # type: ignore[misc]
    assert dataclasses.replace(spec, seed=1).seed == 1
    assert MixSpec(recipe="self-distill", batch_size=4, seed=0).share() == (0.5, "rows")
    assert MixSpec(0.2, mix_by="tokens", batch_size=4, seed=0).share() == (0.2, "tokens")


def test_the_plan_converts_a_token_share_only_when_there_are_rehearsal_rows():
    spec = MixSpec(0.1, mix_by="tokens", batch_size=4, seed=0, world_size=1)
    with pytest.raises(MixError, match="needs tokens_per_row"):
        spec.plan(40, 10, 1)
    assert round(spec.plan(40, 10, 1, (20.0, 80.0)).ratio, 4) == 0.027
    with pytest.raises(MixError, match="rehearsal source has no rows"):
        spec.plan(40, 0, 1)
