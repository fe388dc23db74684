"""The experiment config: the schema of every section (:mod:`.schema`), reading and validating a
TOML file (:mod:`.parse`) and checking what it names against this machine (:mod:`.check`).

``from replaybank.llm.config import Config`` is the public path; the names below are re-exported.
"""

from __future__ import annotations

from replaybank.llm.config.parse import (
    ALL_LINEAR,
    ARM_SOURCES,
    BUILTIN_AGENDA,
    BUILTIN_PROBE,
    BUILTIN_TOOLAPI,
    DEFAULT_ARMS,
    SECTIONS,
    Arm,
    ArmSpec,
    Config,
    ConfigError,
    Data,
    Device,
    Evaluation,
    KLOn,
    Lineage,
    MixBy,
    Orchestration,
    Output,
    Training,
)

__all__ = [
    "ALL_LINEAR", "ARM_SOURCES", "BUILTIN_AGENDA", "BUILTIN_PROBE", "BUILTIN_TOOLAPI", "DEFAULT_ARMS",
    "SECTIONS", "Arm", "ArmSpec", "Config", "ConfigError", "Data", "Device", "Evaluation", "KLOn",
    "Lineage", "MixBy", "Orchestration", "Output", "Training",
]
