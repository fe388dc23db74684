"""Several loop runs side by side: lineages x rehearsal on/off x seeds, each in its own folder.

A run's folder is ``<out>/<lineage>-<rehearsal|norehearsal>-s<seed>`` with its own store,
adapters, ``state.json`` and ``log.txt``; running the same command again resumes every run.
With ``jobs > 1`` the runs go to that many worker processes (each loads the model, one torch
thread each).

Example:
    >>> from replaybank.llm.loop.config import LoopConfig
    >>> [name for name, _ in cells(LoopConfig(), ["window", "best"], [True, False], [0])]
    ['window-rehearsal-s0', 'window-norehearsal-s0', 'best-rehearsal-s0', 'best-norehearsal-s0']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from replaybank.llm.loop.config import LoopConfig


def cells(
    cfg: LoopConfig, lineages: Sequence[str], rehearsal: Sequence[bool], seeds: Sequence[int]
) -> list[tuple[str, LoopConfig]]:
    """``(folder name, config)`` of every run of the grid, lineage-major."""
    out = []
    for lineage in lineages:
        for on in rehearsal:
            for seed in seeds:
                changes: dict[str, Any] = {"lineage": lineage, "seed": seed}
                if not on:
                    changes["rehearsal"] = "none"
                name = f"{lineage}-{'rehearsal' if on else 'norehearsal'}-s{seed}"
                out.append((name, cfg.with_(**changes)))
    return out


def _run_one(name: str, data: dict[str, Any], source: str, folder: str) -> str:
    from replaybank.llm.recipes.loop import run_loop

    cfg = LoopConfig.from_dict(data, source=source)
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "log.txt", "a", encoding="utf-8") as logf:

        def log(msg: str) -> None:
            print(f"[{name}] {msg}", flush=True)
            logf.write(msg + "\n")
            logf.flush()

        run_loop(cfg, path, log=log)
    return name


def run_grid(runs: list[tuple[str, LoopConfig]], out: Path, *, jobs: int = 1, log: Callable[[str], None] = print) -> None:
    """Run (or resume) every run, ``jobs`` at a time, then write the report."""
    from replaybank.llm.loop.report import write_report

    out.mkdir(parents=True, exist_ok=True)
    args = [(name, cfg.to_dict(), cfg.source, str(out / name)) for name, cfg in runs]
    if jobs <= 1 or len(runs) == 1:
        for a in args:
            _run_one(*a)
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
            for done in pool.map(_run_one, *zip(*args, strict=True)):
                log(f"[{done}] finished")
    log(f"report: {write_report(out)}")
