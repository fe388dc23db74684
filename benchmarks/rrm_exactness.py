"""How exactly RR-M (PrioritizedReshuffled) keeps P under skewed priorities, against plain PER.

Run ``python benchmarks/rrm_exactness.py`` (add ``REPLAYBANK_KERNELS=numpy`` for the numpy
kernels). Setting: lognormal(sigma=2) priorities (seed 42), N=1000, batch 64,
eps=0, 3000 sample calls, alpha 1.0 and 0.6. Per sampler it prints and writes to
``benchmarks/results/rrm_exactness[_numpy].json``:

* ``low_half_over``: draws of the low-priority half over their expected count, minus 1;
* ``duplicates_per_batch``: batch size minus distinct items, averaged over calls;
* ``max_ahead``: the most any item's draw count ever led its expected count ``t * B * P(i)``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

import replaybank as rb

N, BATCH, CALLS = 1000, 64, 3000


def run(sampler_cls: type, alpha: float) -> dict[str, float]:
    p = np.random.default_rng(42).lognormal(0.0, 2.0, N)
    buf = rb.ReplayBuffer(N, sampler=sampler_cls(alpha=alpha, beta=0.4, eps=0.0), seed=0)
    buf.extend({"i": np.arange(N)}, priorities=p)
    P = p**alpha / (p**alpha).sum()
    counts, dups, ahead = np.zeros(N), 0, -np.inf
    for t in range(1, CALLS + 1):
        drawn = buf.sample(BATCH).data["i"]
        dups += BATCH - len(np.unique(drawn))
        np.add.at(counts, drawn, 1)
        ahead = max(ahead, float((counts - t * BATCH * P).max()))
    low = np.argsort(p)[: N // 2]
    expected = P * BATCH * CALLS
    return {
        "low_half_over": float(counts[low].sum() / expected[low].sum() - 1),
        "duplicates_per_batch": dups / CALLS,
        "max_ahead": ahead,
    }


def main() -> None:
    kernels = os.environ.get("REPLAYBANK_KERNELS", "numba") or "numba"
    rows = {}
    print(f"kernels={kernels}  N={N} batch={BATCH} calls={CALLS} lognormal(sigma=2)")
    print("| alpha | sampler | low half over | duplicates/batch | max ahead |\n|---|---|---:|---:|---:|")
    for alpha in (1.0, 0.6):
        for name, cls in (("PER", rb.Prioritized), ("RR-M", rb.PrioritizedReshuffled)):
            r = rows[f"alpha={alpha} {name}"] = run(cls, alpha)
            print(
                f"| {alpha} | {name} | {100 * r['low_half_over']:+.1f}% | {r['duplicates_per_batch']:.2f} "
                f"| {r['max_ahead']:.1f} |",
                flush=True,
            )
    suffix = "" if kernels == "numba" else f"_{kernels}"
    out = Path(__file__).parent / "results" / f"rrm_exactness{suffix}.json"
    out.write_text(json.dumps({"kernels": kernels, "N": N, "batch": BATCH, "calls": CALLS, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
