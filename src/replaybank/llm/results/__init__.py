"""What the main job (``replaybank run``) computes, typed: the ``metrics.json`` schema as frozen dataclasses.

The fields of these records are the file format: :meth:`Record.to_json` writes a field under its
own name (``None`` fields marked :func:`omitted` are left out; a field marked :data:`FLAT` is
written into its parent's object), and :meth:`Record.from_json` reads the same object back,
checking every key it needs and raising :class:`ResultsError` with the path of the first bad key.
A results file may come from anyone, so nothing here trusts it.

Three files use them: ``metrics.json`` (:class:`RunResult`, which carries
:data:`SCHEMA_VERSION`), and in the run folder ``seeds/seed<N>.json`` (:class:`SeedResult`) and
``arms/seed<N>-<arm>.json`` (:class:`ArmResult`), which resume an interrupted run. Records that
other modules own and this package passes through unread (the config, the data manifests, a
recipe, a suite item's outcome) are :data:`JsonObject`.

:mod:`replaybank.llm.records` holds :class:`Record` and its JSON reading and writing, :mod:`.seed` one arm in one
seed and one seed, :mod:`.training` a generation's training log and a controller's mixture, :mod:`.frontier` an arm's operating points, :mod:`.run` the run over seeds; every name is importable from here.

Example:
    >>> s = Stat.from_json({"mean": 0.5, "std": None, "n": 1, "values": [0.5]}, where="x")
    >>> s.mean, s.to_json()
    (0.5, {'mean': 0.5, 'std': None, 'n': 1, 'values': [0.5]})
    >>> Stat.from_json({"mean": "high", "std": None, "n": 1, "values": []}, where="metrics.json: arms.naive")
    Traceback (most recent call last):
    ...
    replaybank.llm.records.ResultsError: metrics.json: arms.naive.mean: expected a number, got 'high'
"""

from __future__ import annotations

from replaybank.llm.records import JsonObject, Record, ResultsError
from replaybank.llm.results.frontier import Frontier, FrontierPoint
from replaybank.llm.results.run import (
    SCHEMA_VERSION,
    ArmMatrix,
    ArmSummary,
    EarlyWarning,
    Effect,
    FamilySeed,
    FamilyStats,
    FlipCount,
    Gate,
    GateArm,
    GateFamily,
    Interval,
    IntervalMethod,
    Mixing,
    MixingMeasured,
    ProbeComparison,
    ProbeSection,
    RiseRatio,
    RunResult,
    SeedFlips,
    Stat,
    TargetArm,
    Targets,
    WarningPoint,
)
from replaybank.llm.results.seed import (
    ArmResult,
    ArmTraining,
    CurvePoint,
    DomainCell,
    DomainScore,
    Generation,
    Losses,
    LossShare,
    MatrixResult,
    SeedManifest,
    SeedResult,
    SourceUse,
    SuiteScore,
    TrainTotal,
)
from replaybank.llm.results.training import (
    DistillStep,
    EvalPoint,
    MixtureEntry,
    Refresh,
    TrainLogRecord,
    TrainStep,
)

__all__ = [
    "SCHEMA_VERSION", "ArmMatrix", "ArmResult", "ArmSummary", "ArmTraining", "CurvePoint",
    "DomainCell", "DomainScore", "EarlyWarning", "Effect", "FamilySeed", "FamilyStats", "FlipCount", "Frontier", "FrontierPoint",
    "Gate", "GateArm",
    "GateFamily", "Generation", "Interval", "IntervalMethod", "JsonObject", "Losses", "LossShare",
    "MatrixResult", "Mixing", "MixingMeasured", "ProbeComparison", "ProbeSection", "Record", "ResultsError",
    "RiseRatio", "RunResult", "SeedFlips", "SeedManifest", "SeedResult", "SourceUse", "Stat", "SuiteScore",
    "TargetArm", "Targets", "TrainTotal", "WarningPoint",
    "DistillStep", "EvalPoint", "MixtureEntry", "Refresh", "TrainLogRecord", "TrainStep",
]
