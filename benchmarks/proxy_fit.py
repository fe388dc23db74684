"""Fit the ``proxy`` replay controller's weights on a cheap proxy run, then freeze them.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/proxy_fit.py [--population 6] [--rounds 1] [--steps 20]

A proxy run is the main job (``replaybank run``) on a smaller budget of the same model: the
first two skills of the sequence (the qx tool API, then ``@agenda`` entries), ``--steps``
optimizer steps per skill, 16 held-out requests per skill, the smallest suite, one seed. Each
candidate weight vector is one arm ``[recipes.proxy]`` (``controller = "proxy"``, replay of the
earlier skill, from 10%, at most 30%), scored by average accuracy + backward transfer of its
accuracy matrix (higher is better: skills learnt and kept). ``fit_proxy`` (the cross-entropy
method, :mod:`replaybank.controllers.proxy`) draws the candidates; with ``--rounds 1`` it is a
random search over ``--population`` draws, which is what this machine's budget allows (each
candidate costs about two minutes of CPU). Every candidate's figures, the chosen weights and the
fixed 10% / 30% arms of the same proxy run (the reference points, and the proxy side of the
"forgetting mirror": which skill each arm forgets) go to
``benchmarks/results/sequence3/proxy_fit.json``. The chosen weights are then frozen into
``benchmarks/results/sequence3/config.toml``'s ``[recipes.proxy]`` by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402

from replaybank.controllers.proxy import fit_proxy  # noqa: E402
from replaybank.llm.config import Config  # noqa: E402

OUT = Path("benchmarks/results/sequence3/proxy_fit.json")


def proxy_config(steps: int, arms: dict[str, dict]) -> Config:
    """The proxy run: two skills, ``steps`` steps each, 16 held-out requests, the smallest suite."""
    return Config.from_dict({
        "orchestration": {"num_generations": 2, "training_window_size": 1},
        "training": {"num_threads": int(os.environ.get("PROXY_THREADS", "2"))},
        "data": {"domain_train": ["builtin:toolapi", "builtin:agenda"], "domain_eval": ["builtin:toolapi", "builtin:agenda"],
                 "domain_train_rows": steps * 4, "domain_eval_rows": 16},
        "evaluation": {"arms": list(arms), "suite_per_family": 2, "eval_points": 4, "probe_sources": False},
        "recipes": arms,
        "output": {"save_adapters": False},
    })  # fmt: skip


def proxy_arm(weights: np.ndarray) -> dict:
    return {"source": ["replay"], "controller": "proxy", "ratio": 0.1, "floor": 0.02, "max_share": 0.3,
            "controller_params": {"weights": [round(float(w), 4) for w in weights]}}


def score_of(arm: dict) -> tuple[float, dict]:
    """Average accuracy + backward transfer of one arm of a one-seed run's metrics."""
    m = arm["matrix"]["per_seed"][0]
    return float(m["average_accuracy"] + m["backward_transfer"]), {"R": m["R"], "average_accuracy": m["average_accuracy"],
                                                                    "backward_transfer": m["backward_transfer"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--population", type=int, default=6, help="candidates per round (default 6)")
    parser.add_argument("--rounds", type=int, default=1, help="cross-entropy rounds (default 1: a random search)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per skill in the proxy run (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, help="work folder; a run already finished there with the same arms is "
                        "read back instead of trained again (resume after a crash)")
    args = parser.parse_args()
    from replaybank.llm.recipes.rehearsal import run_experiment

    work = args.work or Path(tempfile.mkdtemp(prefix="proxy_fit_"))
    candidates: list[dict] = []
    started = time.perf_counter()

    def run(arms: dict[str, dict], label: str) -> dict:
        done = work / label / "metrics.json"
        if done.is_file():
            earlier = json.loads(done.read_text(encoding="utf-8"))["arms"]
            if all((earlier.get(name, {}).get("spec", {}).get("controller_params") or {}) == arm.get("controller_params", {})
                   for name, arm in arms.items()):
                print(f"{label}: read back from {done}", flush=True)
                return earlier
        metrics = run_experiment(proxy_config(args.steps, arms), work / label, log=lambda m: None, max_steps=args.steps).to_json()
        return metrics["arms"]

    def score(weights: np.ndarray) -> float:
        arms = run({"proxy": proxy_arm(weights)}, f"cand{len(candidates)}")
        value, figures = score_of(arms["proxy"])
        candidates.append({"weights": [float(w) for w in weights], "score": value, **figures})
        print(f"candidate {len(candidates)}: score {value:+.3f}  R {figures['R']}", flush=True)
        return value

    fit = fit_proxy(score, np.random.default_rng(args.seed), rounds=args.rounds, population=args.population)
    fixed = run({"fixed10": {"source": ["replay"], "ratio": 0.1}, "fixed30": {"source": ["replay"], "ratio": 0.3}}, "fixed")
    reference = {name: score_of(arm)[1] | {"score": score_of(arm)[0]} for name, arm in fixed.items()
                 if name != "base"}
    result = {
        "proxy_run": {"skills": ["builtin:toolapi", "builtin:agenda"], "steps_per_skill": args.steps, "eval_rows": 16,
                      "seed": args.seed, "rounds": args.rounds, "population": args.population},
        "chosen_weights": [round(float(w), 4) for w in fit.weights],
        "chosen_score": float(fit.score),
        "candidates": candidates,
        "fixed": reference,
        "seconds": round(time.perf_counter() - started, 1),
        "load_average": list(os.getloadavg()),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print("| arm | score (avg acc + BWT) | R |\n|---|---:|---|")
    for k, c in enumerate(candidates):
        print(f"| proxy candidate {k} | {c['score']:+.3f} | {c['R']} |")
    for name, r in reference.items():
        print(f"| {name} | {r['score']:+.3f} | {r['R']} |")
    print(f"chosen weights: {result['chosen_weights']} ({result['seconds']} s)")


if __name__ == "__main__":
    main()
