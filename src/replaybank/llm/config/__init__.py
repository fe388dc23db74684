"""The configs of every job, one schema: the sections and their keys, defaults and bounds
(:mod:`.schema`), one reader that checks a section (:mod:`.values`), the rehearsal recipe every
job shares (:mod:`.recipe`: :class:`Recipe`, the built-in names, ``[recipes.NAME]`` tables), the
main job's config (:mod:`.parse`, ``replaybank run``), the loop's (:mod:`.loop`, ``replaybank loop``: the shared
``[training]``, ``[evaluation]`` and ``[data]`` sections with the loop's defaults, beside its own
``[loop]``), and the check of what a config names against this machine (:mod:`.check`).

``from replaybank.llm.config import Config`` is the public path; the names below are re-exported.
"""

from __future__ import annotations

from replaybank.llm.config.loop import Loop, LoopConfig
from replaybank.llm.config.parse import Config, with_seed
from replaybank.llm.config.recipe import BUILTIN_RECIPES, ArmPlan, Recipe, load_recipes
from replaybank.llm.config.schema import (
    ALL_LINEAR,
    ARM_SOURCES,
    BUILTIN_AGENDA,
    BUILTIN_LEDGER,
    BUILTIN_PROBE,
    BUILTIN_TOOLAPI,
    DEFAULT_ARMS,
    SECTIONS,
    Data,
    Device,
    Evaluation,
    KLOn,
    Lineage,
    MixBy,
    Orchestration,
    Output,
    SharedData,
    SharedEvaluation,
    Training,
)
from replaybank.llm.config.values import ConfigError, read_section

__all__ = [
    "ALL_LINEAR", "ARM_SOURCES", "BUILTIN_AGENDA", "BUILTIN_LEDGER", "BUILTIN_PROBE", "BUILTIN_TOOLAPI", "DEFAULT_ARMS",
    "BUILTIN_RECIPES", "SECTIONS", "ArmPlan", "Config", "ConfigError", "Data", "Device", "Evaluation", "KLOn",
    "Lineage", "Loop", "LoopConfig", "MixBy", "Orchestration", "Output", "Recipe", "SharedData",
    "SharedEvaluation", "Training",
    "load_recipes", "read_section", "with_seed",
]
