"""One multi-seed report of the main job from seeds trained in separate runs, by ``replaybank run`` itself.

    python benchmarks/combine_seeds.py CONFIG --out DIR RUN [RUN ...]

Each RUN is a finished ``replaybank run`` folder (its ``metrics.json`` and ``seeds/seed<N>.json``).
Seeds can be trained apart (a seed per machine, or new arms at a seed trained later) and still be
reported together: this copies each seed's results into ``DIR.partial/seeds/``, stamped for
CONFIG, and runs ``replaybank run CONFIG --out DIR``, which reads every finished seed back
instead of training it and writes one ``metrics.json`` and ``report.md`` over all of them (the
report's own aggregation, intervals and flips; nothing is recomputed here).

CONFIG's seeds are ``training.seed`` to ``training.seed + evaluation.seeds - 1`` and its arms
``evaluation.arms``. Refused, naming the run and key: a RUN whose config differs from CONFIG in
anything but the seeds, the arms, ``num_threads`` and ``arm_processes`` (a key a RUN's config lacks,
because the run was made before the key existed, matches CONFIG's value when that is the key's default); a seed or arm no RUN holds; two RUNs that
hold the same seed with different data (the data manifest and the base model's suite answers must
agree). An arm
found in several RUNs at one seed is taken from the first RUN listed. The interference probe
kept is the first seed's, as in a single run.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from replaybank.llm.config import Config

#: Keys a combined run may differ in: which seeds and arms a run trained, and how (threads, processes).
FREE = {("training", "seed"), ("evaluation", "seeds"), ("evaluation", "arms"), ("training", "num_threads"),
        ("evaluation", "arm_processes")}
#: Fields of a seed's data manifest that name where a run kept its caches, not what the data is.
WHERE = {"cache", "cached", "prompts", "seconds", "model"}


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    return {sec: {k: v for k, v in body.items() if (sec, k) not in FREE} for sec, body in config.items()
            if isinstance(body, dict)}


_MISSING = object()


def _default(section: str, key: str) -> Any:
    """The default of ``[section] key`` (``_MISSING`` when there is no such key)."""
    body = getattr(Config(), section, None)
    if body is None or not dataclasses.is_dataclass(body):
        return _MISSING
    return {f.name: getattr(body, f.name) for f in dataclasses.fields(body)}.get(key, _MISSING)


def _data(seed: dict[str, Any]) -> Any:
    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in WHERE}
        return x

    # the base arm's answers, not its held-out losses: those move in the last digits with the thread count
    return strip({"manifest": seed["manifest"], "suite": seed["suite"], "base": seed["arms"]["base"]["suite"]})


def combine(config: Path, out: Path, runs: list[Path]) -> Path:
    """Write ``out.partial`` with every seed of ``config`` from ``runs``; return it."""
    cfg = Config.from_toml(config)
    wanted = _comparable(cfg.to_dict())
    arms = [a for a in cfg.evaluation.arms]
    seeds = [cfg.training.seed + k for k in range(cfg.evaluation.seeds)]
    found: dict[int, dict[str, Any]] = {}
    for run in runs:
        metrics = json.loads((run / "metrics.json").read_text())
        theirs = _comparable(metrics["config"])
        for sec in sorted(set(wanted) | set(theirs)):
            for key in sorted(set(wanted.get(sec, {})) | set(theirs.get(sec, {}))):
                if key not in theirs.get(sec, {}) and _default(sec, key) == wanted.get(sec, {}).get(key, _MISSING):
                    continue  # a key added after the run was made, set here at its default
                if wanted.get(sec, {}).get(key) != theirs.get(sec, {}).get(key):
                    sys.exit(f"{run}: [{sec}] {key} = {theirs.get(sec, {}).get(key)!r}, but {config} has "
                             f"{wanted.get(sec, {}).get(key)!r}; only seeds, arms, num_threads and arm_processes may differ")
        for path in sorted((run / "seeds").glob("seed*.json")):
            seed = json.loads(path.read_text())
            n = int(seed["manifest"]["seed"])
            if n not in seeds:
                continue
            if n not in found:
                found[n] = {**seed, "arms": dict(seed["arms"])}
                continue
            if _data(found[n]) != _data(seed):
                sys.exit(f"{path}: seed {n} holds other data or another base arm than the run listed before it")
            for arm, result in seed["arms"].items():
                found[n]["arms"].setdefault(arm, result)
    partial = out.with_name(out.name + ".partial")
    if out.exists() or partial.exists():
        sys.exit(f"{out} or {partial} exists; choose another --out")
    (partial / "seeds").mkdir(parents=True)
    for k, n in enumerate(seeds):
        if n not in found:
            sys.exit(f"seed {n}: in none of {', '.join(map(str, runs))}")
        missing = [a for a in arms if a not in found[n]["arms"]]
        if missing:
            sys.exit(f"seed {n}: no run holds the arms {missing}")
        seed = {**found[n], "arms": {a: found[n]["arms"][a] for a in arms}}
        if k > 0:
            seed["probes"] = {}  # the probe runs on a run's first seed only
        (partial / "seeds" / f"seed{n}.json").write_text(json.dumps(seed))
    key = hashlib.sha256(json.dumps([cfg.to_dict(), len(seeds)], sort_keys=True).encode()).hexdigest()
    (partial / "config.sha256").write_text(key)
    return partial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="the combined run's config: its seeds and arms")
    parser.add_argument("runs", type=Path, nargs="+", help="finished run folders holding the seeds")
    parser.add_argument("--out", type=Path, required=True, help="the combined run folder (must not exist)")
    args = parser.parse_args()
    partial = combine(args.config, args.out, args.runs)
    print(f"wrote {partial}; reporting with replaybank run", file=sys.stderr)
    replaybank = Path(sys.executable).with_name("replaybank")
    sys.exit(subprocess.run([str(replaybank), "run", str(args.config), "--out", str(args.out)], check=False).returncode)


if __name__ == "__main__":
    main()
