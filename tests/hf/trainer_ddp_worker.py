"""One rank of examples/hf_trainer_rehearsal.py under torchrun, recording the rows it trains on.

Run by tests/hf/test_example_trainer.py as ``torchrun --nproc-per-node 2 trainer_ddp_worker.py
OUT_DIR -- EXAMPLE_ARGS...``; writes OUT_DIR/rank{RANK}.json with the prompt of every row the
collator received, the world size Trainer saw and the number of steps taken.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import torch.distributed as dist
import transformers

EXAMPLE = Path(__file__).parents[2] / "examples" / "hf_trainer_rehearsal.py"


def main(out_dir: str, argv: list[str]) -> None:
    seen: list[list[str]] = []
    collate = transformers.DataCollatorForSeq2Seq.__call__

    def recording(self, features, return_tensors=None):  # type: ignore[no-untyped-def]
        tokens = [self.tokenizer.convert_ids_to_tokens(f["input_ids"]) for f in features]
        seen.append(["".join(t).split("\n")[0] for t in tokens])
        return collate(self, features, return_tensors)

    transformers.DataCollatorForSeq2Seq.__call__ = recording
    spec = importlib.util.spec_from_file_location("hf_trainer_rehearsal", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    trainer = example.main(argv)
    kl = getattr(trainer.compute_loss_func, "last", {})
    result = {"seen": seen, "world": trainer.args.world_size, "steps": trainer.state.global_step,
              "kl_positions": kl.get("kl_positions"), "kl": kl.get("kl")}  # fmt: skip
    Path(out_dir, f"rank{os.environ['RANK']}.json").write_text(json.dumps(result))
    # Leave the group together: a rank that exits while its peer still holds the gloo group open
    # can make the peer's gloo threads abort on "connection closed".
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    # Skip interpreter finalization: gloo's worker threads can still be joinable when Python tears
    # down its modules, and libstdc++ then aborts the rank ("terminate called without an active
    # exception", exit -6) after the result above is already written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[3:])
