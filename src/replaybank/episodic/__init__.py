"""Episodic memory for an agent: record its attempts, replay the successful ones.

* :mod:`.episode`: the data model (``Task``, ``Step``, ``Verdict``, ``Episode``).
* :mod:`.store`: ``EpisodeStore``, the SQLite store (crash-safe, multi-process, versioned).
* :mod:`.experience`: the higher levels of experience the store keeps with their provenance:
  ``Insight`` (a lesson in words) and ``Workflow`` (a success's calls with typed placeholders).
* :mod:`.workflow`, :mod:`.checks`, :mod:`.replay`: a success abstracted into a workflow, the
  checks a workflow passes before it is replayed on a new task, and the replay itself.
* :mod:`.export`: successful episodes as training rows (completion-only, chat template).
* :mod:`.qx` and :mod:`.env`: the qx tool-API environment and its checker; the
  bring-your-own ``Environment`` protocol and JSONL task files.
* :mod:`.turns`: environments that run the agent's calls (``ToolEnvironment``), so an episode
  takes several turns; multi-turn demonstrations.
* :mod:`.retrieval`: BM25 retrieval of similar successes as in-context examples.

Only the standard library and numpy are imported here.
"""

from __future__ import annotations

from .episode import Episode, Step, StoredEpisode, Task, Verdict, demonstration
from .experience import Insight, StoredInsight, StoredWorkflow, Workflow
from .store import (
    SCHEMA_VERSION,
    CorruptStoreError,
    EpisodeStore,
    Retention,
    SchemaVersionError,
    StoreError,
    StoreLockedError,
)

__all__ = [
    "SCHEMA_VERSION",
    "CorruptStoreError",
    "Episode",
    "EpisodeStore",
    "Insight",
    "Retention",
    "SchemaVersionError",
    "Step",
    "StoreError",
    "StoreLockedError",
    "StoredEpisode",
    "StoredInsight",
    "StoredWorkflow",
    "Task",
    "Verdict",
    "Workflow",
    "demonstration",
]
