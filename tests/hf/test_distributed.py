"""Exact quotas across ranks: 2 real processes on the gloo backend (as torchrun would start them)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("datasets")
torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from replaybank.hf import MixPlan  # noqa: E402
from replaybank.mixing import batch_quotas  # noqa: E402

_spec = importlib.util.spec_from_file_location("hf_dist_worker", Path(__file__).with_name("dist_worker.py"))
assert _spec is not None and _spec.loader is not None
W = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(W)

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def gathered(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist") / "rows.json"
    port = str(_free_port())
    procs = []
    start = time.perf_counter()
    for rank in range(WORLD):
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(sys.path),
            "RANK": str(rank),
            "WORLD_SIZE": str(WORLD),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, W.__file__, str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = [p.communicate(timeout=120)[0] for p in procs]
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log
    print(f"2-process gloo run: {time.perf_counter() - start:.1f} s")
    data = json.loads(out.read_text())
    assert [d["rank"] for d in data] == list(range(WORLD))
    return data


def _global_batches(parts: list[list[list[int]]]) -> list[list[tuple[int, int]]]:
    n = len(parts[0])
    assert all(len(p) == n for p in parts) and n % W.BATCH == 0
    return [
        [tuple(row) for p in parts for row in p[g * W.BATCH : (g + 1) * W.BATCH]]
        for g in range(n // W.BATCH)
    ]


def test_every_global_batch_holds_the_exact_quota(gathered):
    batches = _global_batches([d["full"] for d in gathered])
    g = W.BATCH * WORLD
    plan = MixPlan(W.N_DOMAIN, W.N_REHEARSAL, W.RATIO, batch_size=W.BATCH, seed=W.SEED,
                   world_size=WORLD, epochs=W.EPOCHS)
    assert len(batches) == plan.total_batches()
    # The rule, applied to the global batch: the credit carries over the epochs.
    want = batch_quotas(g, [1 - W.RATIO, W.RATIO], num_batches=len(batches))[:, 1]
    got = np.array([sum(s for s, _ in b) for b in batches])
    assert (got == want).all(), (got, want)
    # 0.15 * 8 = 1.2 rehearsal rows: 1 or 2 per global batch, never 0, 1.2 on average.
    assert set(got.ravel().tolist()) == {1, 2}
    # Each rank's part: the rehearsal rows are spread, no rank gets them all.
    per_rank = np.array([[sum(s for s, _ in d["full"][k * W.BATCH:(k + 1) * W.BATCH])
                          for k in range(len(batches))] for d in gathered])
    assert abs(int(per_rank[0].sum()) - int(per_rank[1].sum())) <= 1


def test_no_row_duplicated_or_dropped_across_ranks(gathered):
    batches = _global_batches([d["full"] for d in gathered])
    plan = MixPlan(W.N_DOMAIN, W.N_REHEARSAL, W.RATIO, batch_size=W.BATCH, seed=W.SEED,
                   world_size=WORLD, epochs=W.EPOCHS)
    epoch_of = [b.epoch for b in plan]
    plan = MixPlan(W.N_DOMAIN, W.N_REHEARSAL, W.RATIO, batch_size=W.BATCH, seed=W.SEED,
                   world_size=WORLD, epochs=W.EPOCHS)
    # The ranks' rows together are exactly the single-process global stream, in order.
    single = [(int(s), int(i if s == 0 else 1000 + i)) for b in plan
              for s, i in zip(b.source, b.index, strict=True)]
    assert [row for b in batches for row in b] == single
    for e in range(W.EPOCHS):
        rows = [x for b, be in zip(batches, epoch_of) if be == e for s, x in b if s == 0]
        assert len(rows) == len(set(rows))  # no domain row twice in an epoch, over both ranks
        assert W.N_DOMAIN - len(rows) < W.BATCH * WORLD  # only the short tail is left out


def test_resume_matches_the_uninterrupted_run(gathered):
    for d in gathered:
        assert d["resumed"] == d["full"]


def test_sampler_and_hf_dataset_give_each_rank_the_same_part(gathered):
    for d in gathered:
        assert d["hf"] == d["full"]
        assert d["accelerate"] == d["full"]  # the global stream, split by accelerate as Trainer does
        assert d["sharded"] == d["full"]  # ... and with dispatch_batches=False
        flat = [i for b in d["sampler"] for i in b]
        as_rows = [[int(i >= W.N_DOMAIN), i if i < W.N_DOMAIN else 1000 + i - W.N_DOMAIN] for i in flat]
        assert as_rows == d["full"]
