"""The run's report: ``metrics.json`` assembled (:mod:`.metrics`), seeds aggregated and the targets
checked (:mod:`.seeds`), ``report.md`` (:mod:`.markdown`), the plots (:mod:`.plots`), and the output
folder with its partial results (:mod:`.folder`).

The names of the former ``replaybank.llm.report`` module are re-exported here.
"""

from __future__ import annotations

from replaybank.llm.report.metrics import (
    METRICS_SCHEMA_VERSION,
    build_metrics,
    effect,
    probe_vs_forgetting,
    write_metrics,
    write_outputs,
)
from replaybank.llm.report.plots import BEHAVIOUR_PLOT, PLOT_NAME

__all__ = [
    "BEHAVIOUR_PLOT", "METRICS_SCHEMA_VERSION", "PLOT_NAME", "build_metrics", "effect",
    "probe_vs_forgetting", "write_metrics", "write_outputs",
]
