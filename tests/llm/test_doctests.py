"""The docstring examples of the LLM side's modules hold."""

from __future__ import annotations


def test_doctests():
    import doctest

    import replaybank.llm.config as config
    import replaybank.llm.data.corpus as corpus
    import replaybank.llm.data.rows as rows
    import replaybank.llm.eval.interference as probe
    import replaybank.llm.recipes.rehearsal as run
    import replaybank.llm.report.metrics as report
    import replaybank.llm.train.kl as train
    import replaybank.llm.train.lineage as generations

    for module in (config, corpus, generations, probe, report, rows, run, train):
        assert doctest.testmod(module).failed == 0, module.__name__
