"""Several loop runs side by side: lineages x rehearsal on/off x seeds, each in its own folder.

Rehearsal off is ``[loop] recipe = "none"``; on is the config's own recipe.

A run's folder is ``<out>/<lineage>-<rehearsal|norehearsal>-s<seed>`` with its own store,
adapters, ``state.json`` and ``log.txt``; running the same command again resumes every run.
With ``jobs > 1`` the runs go to that many worker processes (each loads the model, one torch
thread each).

Example:
    >>> from replaybank.llm.config.loop import LoopConfig
    >>> [name for name, _ in cells(LoopConfig(), ["window", "best"], [True, False], [0])]
    ['window-rehearsal-s0', 'window-norehearsal-s0', 'best-rehearsal-s0', 'best-norehearsal-s0']
"""

from __future__ import annotations

from collections.abc import Sequence

from replaybank.llm.config.loop import LoopConfig


def cells(
    cfg: LoopConfig, lineages: Sequence[str], rehearsal: Sequence[bool], seeds: Sequence[int]
) -> list[tuple[str, LoopConfig]]:
    """``(folder name, config)`` of every run of the grid, lineage-major."""
    out = []
    for lineage in lineages:
        for on in rehearsal:
            for seed in seeds:
                changes: dict[str, str | int] = {"lineage": lineage, "seed": seed}
                if not on:
                    changes["recipe"] = "none"
                name = f"{lineage}-{'rehearsal' if on else 'norehearsal'}-s{seed}"
                out.append((name, cfg.with_(**changes)))
    return out


