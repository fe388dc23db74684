from __future__ import annotations

import pytest

from replaybank.cl.config import STRATEGY_NAMES, TrainConfig, check_strategies, protocol_config
from replaybank.errors import ReplayBankError


def test_der_protocol_fixes_its_values() -> None:
    c = protocol_config("der")
    assert (c.epochs, c.batch_size, c.replay_batch_size) == (1, 10, 10)
    with pytest.raises(ReplayBankError, match="der protocol"):
        protocol_config("der", epochs=3)


def test_online_is_single_pass_and_multi_epoch_defaults() -> None:
    assert protocol_config("online", batch_size=4).batch_size == 4
    with pytest.raises(ReplayBankError, match="single pass"):
        protocol_config("online", epochs=2)
    assert protocol_config("multi-epoch").epochs == 5


@pytest.mark.parametrize("size", [0, -5])
def test_buffer_size_must_be_positive(size: int) -> None:
    with pytest.raises(ReplayBankError, match="buffer size"):
        TrainConfig(buffer_size=size)


def test_unknown_protocol_and_strategy_list_valid_names() -> None:
    with pytest.raises(ReplayBankError, match="der, online, multi-epoch"):
        protocol_config("offline")  # type: ignore[arg-type]
    with pytest.raises(ReplayBankError) as info:
        check_strategies(["er", "ewc"])
    assert "'ewc'" in str(info.value)
    for name in STRATEGY_NAMES:
        assert name in str(info.value)
    with pytest.raises(ReplayBankError, match="twice"):
        check_strategies(["er", "er"])
