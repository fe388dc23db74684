"""Where the loop's tasks come from: the built-in qx ladder or a JSONL task file."""

from __future__ import annotations

from pathlib import Path

from replaybank.episodic import Task
from replaybank.episodic.env import Environment, JsonlTasks, QxChecker, QxEnvironment
from replaybank.llm.config.loop import LoopConfig


class FileEnvironment(QxChecker):
    """Tasks from a JSONL file (:class:`~replaybank.episodic.env.JsonlTasks`), checked as qx calls."""

    def __init__(self, path: str | Path) -> None:
        self.source = JsonlTasks(path)

    def tasks(self, n: int, *, split: str = "train", seed: int = 0) -> list[Task]:
        return self.source.tasks(n, split=split, seed=seed)  # type: ignore[arg-type]


def make_environment(cfg: LoopConfig) -> Environment:
    """``builtin:qx`` (the ladder at ``[loop] levels``) or a JSONL task file."""
    if cfg.loop.tasks == "builtin:qx":
        return QxEnvironment(levels=cfg.loop.levels)
    return FileEnvironment(cfg.loop.tasks)
