"""Acting speed of the loop: batched generation stopped at the call's end vs plain one-by-one ``generate``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/loop_generate.py [--prompts 32] [--context 3] [--max-new-tokens 40]

Loads SmolLM2-135M-Instruct on the CPU with one torch thread, seeds a store with 16 qx
demonstrations, and builds ``--prompts`` held-out qx requests (ladder levels 1 and 2) with
``--context`` examples retrieved by BM25 in context: the prompts the loop acts on. Then, on the same
prompts, in the same process, greedy:

* ``batched, stop at >>``: :func:`replaybank.llm.loop.act.attempt` (what ``replaybank loop`` runs:
  batches of ``--batch-size``, per-row stop at the end of the call or of the turn);
* ``batched, stop at end of turn``: the same batches without the call-end rule;
* ``one by one, HF generate``: ``model.generate`` per prompt (greedy, ``max_new_tokens``, stopping at
  ``<|im_end|>``/EOS), the way a new user would run it.

Prints a table (generated tokens, wall and CPU seconds, generated tokens/s, exact successes) and
writes ``benchmarks/results/loop_generate.json``. Wall time on a shared machine includes the
neighbours; CPU time does not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--context", type=int, default=3, help="retrieved examples in context")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", default="benchmarks/results/loop_generate.json")
    args = parser.parse_args()

    import torch

    from replaybank.episodic import EpisodeStore, demonstration
    from replaybank.episodic.env import QxEnvironment
    from replaybank.episodic.retrieval import Retriever
    from replaybank.llm.data.rows import _render
    from replaybank.llm.eval.decode import stop_token_ids
    from replaybank.llm.loop.act import attempt, build_prompts, call_end
    from replaybank.llm.model import load_model

    torch.set_num_threads(1)
    model, tok = load_model("SmolLM2-135M-Instruct", log=lambda m: None)
    env = QxEnvironment(levels=(1, 2))
    with EpisodeStore(Path(tempfile.mkdtemp()) / "ep.db") as store:
        store.add_many([demonstration(t, [" ".join(t.expected)]) for t in env.tasks(16, split="train", seed=0)])
        retriever = Retriever.from_store(store)
    tasks = env.tasks(args.prompts, split="heldout", seed=0)
    prompts = build_prompts(tasks, retriever, args.context)
    kw = {"max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size}
    rows = []

    def timed(name: str, fn) -> None:  # type: ignore[no-untyped-def]
        w0, c0 = time.perf_counter(), cpu_seconds()
        tokens, exact = fn()
        wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
        rows.append({"method": name, "prompts": len(tasks), "generated_tokens": tokens, "wall_s": round(wall, 2),
                     "cpu_s": round(cpu, 2), "tokens_per_s_wall": round(tokens / wall, 1),
                     "tokens_per_s_cpu": round(tokens / cpu, 1), "exact": exact})
        print(f"{name}: {tokens} tokens, {wall:.1f} s wall, {cpu:.1f} s CPU, exact {exact}/{len(tasks)}", flush=True)

    def batched(max_calls: int) -> tuple[int, int]:
        out, _ = attempt(model, tok, env, tasks, prompts, max_calls=max_calls, **kw)
        return sum(a.n_tokens for a in out), sum(a.verdict.success for a in out)

    def end_of_turn() -> tuple[int, int]:
        from replaybank.llm.eval.decode import generate_detailed

        texts = [_render(tok, m, add_generation_prompt=True) for m, _ in prompts]
        gens = generate_detailed(model, tok, texts, rendered=True, **kw)
        ok = 0
        for t, g in zip(tasks, gens, strict=True):
            cut = call_end(g.text, 1)
            ok += env.check(t, g.text[:cut] if cut else g.text).success
        return sum(g.n_tokens for g in gens), ok

    def one_by_one() -> tuple[int, int]:
        stops = stop_token_ids(tok)
        total = ok = 0
        for t, (msgs, _) in zip(tasks, prompts, strict=True):
            ids = tok(_render(tok, msgs, add_generation_prompt=True), return_tensors="pt", add_special_tokens=False)
            with torch.no_grad():
                gen = model.generate(**ids, max_new_tokens=args.max_new_tokens, do_sample=False,
                                     eos_token_id=stops, pad_token_id=tok.pad_token_id)
            new = gen[0, ids["input_ids"].shape[1]:].tolist()
            total += len(new)
            text = tok.decode(new, skip_special_tokens=True).strip()
            cut = call_end(text, 1)
            ok += env.check(t, text[:cut] if cut else text).success
        return total, ok

    timed("batched, stop at >>", lambda: batched(1))
    timed("batched, stop at end of turn", end_of_turn)
    timed("one by one, HF generate", one_by_one)
    prompt_tokens = sum(len(tok(_render(tok, m, add_generation_prompt=True))["input_ids"]) for m, _ in prompts)
    print(f"\n{len(tasks)} held-out qx prompts, {args.context} BM25 examples in context, "
          f"{prompt_tokens / len(tasks):.0f} prompt tokens on average, greedy, max_new_tokens {args.max_new_tokens}, "
          f"batch {args.batch_size}, 1 torch thread\n")
    print(f"{'method':<32}{'tokens':>8}{'wall s':>9}{'CPU s':>8}{'tok/s wall':>12}{'tok/s CPU':>11}{'exact':>7}")
    for r in rows:
        print(f"{r['method']:<32}{r['generated_tokens']:>8}{r['wall_s']:>9}{r['cpu_s']:>8}"
              f"{r['tokens_per_s_wall']:>12}{r['tokens_per_s_cpu']:>11}{r['exact']:>7}")
    base = rows[-1]
    for r in rows[:-1]:
        print(f"{r['method']}: {base['wall_s'] / r['wall_s']:.1f}x less wall time, "
              f"{base['cpu_s'] / r['cpu_s']:.1f}x less CPU time than one by one")
    result = {"machine": platform.processor() or platform.machine(), "torch_threads": 1, "prompts": len(tasks),
              "context_examples": args.context, "mean_prompt_tokens": round(prompt_tokens / len(tasks), 1),
              "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
