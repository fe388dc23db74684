"""The trained source: a tiny MoE model trains for a second, is cached, reloads, and is recorded
on both workloads (the real run trains for minutes: benchmarks/moe_traces.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from replaybank.errors import ReplayBankError  # noqa: E402
from replaybank.traces import record, union_stats  # noqa: E402
from replaybank.traces.moe import MoeSpec, load_or_train  # noqa: E402
from replaybank.traces.workloads import encode, windows, workload_texts  # noqa: E402


def test_train_cache_reload_and_record(tmp_path: Path) -> None:
    spec = MoeSpec(layers=2, experts=4, hidden=32, expert_hidden=32, heads=2, seq_len=32, batch=2, seconds=1.0)
    model, first = load_or_train(spec, tmp_path)
    assert first["steps"] >= 1 and np.isfinite(first["heldout_loss_bytes"])
    again, second = load_or_train(spec, tmp_path)  # from the cache: the same record, no training
    assert second == first and len(list(tmp_path.iterdir())) == 1
    for name in ("prose", "code"):
        texts = workload_texts(name)  # type: ignore[arg-type]
        wins, docs = windows(texts, 3, 12, seed=0)
        assert all(len(w) == 12 for w in wins) and len(docs) == 3
        trace = record(again, [w[:8] for w in wins], prefill_chunk=4, continuations=[w[8:] for w in wins])
        assert trace.num_steps == 3 * (2 + 4) and trace.num_experts == (4, 4)
        assert all(s["max"] <= 4 for s in union_stats(trace))


def test_workloads_are_apart_and_bytes() -> None:
    from replaybank.traces.workloads import prose_split

    train, held = prose_split()
    assert not set(train.doc_ids) & set(held.doc_ids)
    assert encode("é") == [195, 169]
    with pytest.raises(ReplayBankError, match="workload = 'poetry'"):
        workload_texts("poetry")  # type: ignore[arg-type]
    with pytest.raises(ReplayBankError, match="passages of at least"):
        windows(held, 10**6, 8, seed=0)


def test_a_broken_cache_entry_is_refused(tmp_path: Path) -> None:
    spec = MoeSpec(seconds=0.0)
    (tmp_path / f"mixtral-{spec.digest()}").mkdir()
    with pytest.raises(ReplayBankError, match="not a trained checkpoint"):
        load_or_train(spec, tmp_path)
