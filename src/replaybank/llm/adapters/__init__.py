"""The adapter library: LoRA adapters as PEFT folders with checked manifests, a retention gate at
registration, merging (PEFT's combination types) and routing per request with a fallback to the
base model. See docs/adapters.md.

Modules: :mod:`.library` (the folder, atomic registration of a :class:`Registration`, loading with checks), :mod:`.manifest`
(the manifest's schema), :mod:`.gate` (figures against a floor; the general-suite measurement),
:mod:`.attach` (an adapter onto a base model, no code executed), :mod:`.merge` (merges, and the
learners of one skill aggregated), :mod:`.route`, :mod:`.errors`, :mod:`.cli` (``replaybank
adapters ...``). Torch and PEFT are imported lazily.
"""

from __future__ import annotations

from replaybank.llm.adapters.errors import (
    AdapterExistsError,
    AdapterNotFoundError,
    EmptyLibraryError,
    FingerprintError,
    GateError,
    HashMismatchError,
    LibraryError,
    LibraryRepairWarning,
    ManifestError,
    MergeError,
    SignatureError,
)
from replaybank.llm.adapters.gate import gate, suite_measure
from replaybank.llm.adapters.library import AdapterLibrary, Registration
from replaybank.llm.adapters.manifest import Manifest
from replaybank.llm.adapters.merge import aggregate, merge
from replaybank.llm.adapters.route import Route, Router, arrow_model, load_all, routed

__all__ = [
    "AdapterExistsError", "AdapterLibrary", "AdapterNotFoundError", "EmptyLibraryError", "FingerprintError", "GateError",
    "HashMismatchError", "LibraryError", "LibraryRepairWarning", "Manifest", "ManifestError", "MergeError", "Registration",
    "Route", "Router", "SignatureError", "aggregate",
    "arrow_model", "gate", "load_all", "merge", "routed", "suite_measure",
]
