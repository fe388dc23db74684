"""The loop's generations registered in an adapter library (``[loop] library``).

Each finished generation ``g`` of run folder ``RUN`` becomes the library entry ``RUN-genG`` (the
folder's name when it is a name, else ``loop``): its PEFT folder ``adapters/genG``, the figures the
loop measured (suite retention, held-out success without context as the domain figure, retention
per family), the distinct task texts it was trained on (the lineage's successes and the
demonstrations) as the router's example prompts, and the lineage and rows as its data manifest. Registration runs after
``state.json`` records the generation, over every finished generation not yet in the library, so a
killed run catches up when it resumes; an entry already there with the same weights is left alone.

Example:
    >>> entry_name(Path("runs/loop/window-rehearsal-s0"), 3)
    'window-rehearsal-s0-gen3'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from replaybank.episodic import EpisodeStore
from replaybank.llm.adapters import AdapterExistsError, AdapterLibrary, Registration
from replaybank.llm.config.names import MAX_NAME, is_name
from replaybank.llm.loop.results import GenerationRow
from replaybank.llm.train.peft_files import sha256_file

__all__ = ["entry_name", "register_generations"]

MAX_EXAMPLES = 64


def entry_name(out: Path, generation: int) -> str:
    """``RUN-genG`` for run folder ``out`` (``loop-genG`` when its name is not a name)."""
    stem = out.resolve().name
    stem = stem if is_name(stem) and len(stem) <= MAX_NAME - 12 else "loop"
    return f"{stem}-gen{generation}"


def register_generations(
    library: Path, out: Path, rows: Sequence[GenerationRow], store: EpisodeStore, *, skill: str, base_name: str,
    fingerprint: str, recipe: Mapping[str, object] | None, include_replayed: bool = True,
) -> list[str]:
    """Register every finished generation (``rows``: ``state.json``'s) missing from ``library``; return the new names.

    ``include_replayed`` False (``[loop] consolidate = "own"``): replayed episodes were not trained
    on, and their tasks are not among the router's example prompts.

    Raises:
        AdapterExistsError: ``RUN-genG`` is in the library with other weights (another run of the
            same name registered there); rename one of the runs or use another library.
        ManifestError, GateError, ...: see :meth:`AdapterLibrary.add`.
    """
    lib = AdapterLibrary(library, create=True)
    added = []
    for row in rows:
        g = row.generation
        if g == 0:
            continue
        name, folder = entry_name(out, g), out / "adapters" / f"gen{g}"
        index = lib.index()
        if name in index:
            if index[name].get("sha256") != sha256_file(folder / "adapter_model.safetensors"):
                raise AdapterExistsError(f"{library}: holds another adapter under this name (not {folder}); "
                                         "rename the run folder or use another [loop] library", adapter=name, field="name")
            continue
        lineage = row.lineage or [g]
        trained = [r for r in store.episodes(generation=lineage, success=True)
                   if include_replayed or r.episode.source != "replayed"] + store.episodes(source="demo", success=True)
        tasks = dict.fromkeys(r.episode.task.text for r in trained)  # what consolidation trained on
        m = row.evaluation
        figures = {"retention": m.retention, "domain": m.no_context.success, "per_family": m.suite.retention,
                   "n": m.no_context.n}
        lib.add(folder, Registration(
            name, skill=skill, domain=skill, fingerprint=fingerprint, base_name=base_name, examples=list(tasks)[:MAX_EXAMPLES],
            figures=figures, recipe=recipe,
            data={"run": str(out), "generation": g, "lineage": lineage, "train_rows": row.train_rows},
        ))
        added.append(name)
    return added
