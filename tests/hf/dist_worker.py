"""One rank of the 2-process gloo test (tests/hf/test_distributed.py); run as a script.

Reads RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT like a process started by torchrun, joins a
gloo process group, reads its part of the mixed stream three ways and gathers the rows on rank 0,
which writes them as JSON to argv[1].
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from replaybank.hf import MixSpec, mix
from replaybank.hf.torch import MixedBatchSampler, MixedIterableDataset

N_DOMAIN, N_REHEARSAL, RATIO, BATCH, SEED, EPOCHS, RESUME_AT = 53, 11, 0.15, 4, 7, 2, 31


def rows() -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    return [{"x": i} for i in range(N_DOMAIN)], [{"x": 1000 + i} for i in range(N_REHEARSAL)]


def main(out: str) -> None:
    dist.init_process_group("gloo")
    domain, rehearsal = rows()
    kw = {"batch_size": BATCH, "seed": SEED, "epochs": EPOCHS}
    # 1. torch IterableDataset, rank and world size from torch.distributed, through a DataLoader
    ds = MixedIterableDataset(domain, rehearsal, MixSpec(RATIO, **kw))
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH)
    full = [[int(s), int(x)] for b in loader for s, x in zip(b["source"], b["x"], strict=True)]
    # 2. the same, interrupted after RESUME_AT rows, state saved as JSON, resumed in a new object
    ds = MixedIterableDataset(domain, rehearsal, MixSpec(RATIO, **kw))
    it = iter(ds)
    head = [next(it) for _ in range(RESUME_AT)]
    state = json.loads(json.dumps(ds.state_dict()))
    again = MixedIterableDataset(domain, rehearsal, MixSpec(RATIO, **kw))
    again.load_state_dict(state)
    resumed = [[r["source"], r["x"]] for r in head + list(again)]
    # 3. the batch sampler and the HF dataset with rank="auto"
    sampler = [list(b) for b in MixedBatchSampler(N_DOMAIN, N_REHEARSAL, MixSpec(RATIO, **kw))]
    hf = [[r["source"], r["x"]] for r in mix(domain, rehearsal, MixSpec(RATIO, **kw), rank="auto")]
    # 4. what Trainer does: the whole stream (rank=None) through accelerate's prepared loader,
    #    which by default for iterable datasets has rank 0 read and dispatch each rank its block
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    dl = acc.prepare(torch.utils.data.DataLoader(mix(domain, rehearsal, MixSpec(RATIO, **kw)), batch_size=BATCH))
    via_acc = [[int(s), int(x)] for b in dl for s, x in zip(b["source"], b["x"], strict=True)]
    # 5. Trainer with dispatch_batches=False: every rank reads the stream and keeps its block
    from accelerate.data_loader import prepare_data_loader

    dl = prepare_data_loader(
        torch.utils.data.DataLoader(mix(domain, rehearsal, MixSpec(RATIO, **kw)), batch_size=BATCH),
        num_processes=dist.get_world_size(), process_index=dist.get_rank(),
        put_on_device=False, dispatch_batches=False,
    )  # fmt: skip
    sharded = [[int(s), int(x)] for b in dl for s, x in zip(b["source"], b["x"], strict=True)]
    mine = {
        "rank": dist.get_rank(), "full": full, "resumed": resumed, "sampler": sampler, "hf": hf,
        "accelerate": via_acc, "sharded": sharded,
    }  # fmt: skip
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()
    # Skip interpreter finalization, where gloo's still-joinable threads can abort the process.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
