"""Continual LoRA fine-tuning of an LLM with a rehearsal buffer (``replaybank run``).

Each job is one recipe module read top to bottom (:mod:`.recipes`: the main job, the probe, the
consolidation loop) over component packages named for what they are: :mod:`.config` (the schema,
reading, checks), :mod:`.data` (corpora, rows and masking, domain data, self-synthesis),
:mod:`.eval` (losses, the suite and its checkers, generation, domain accuracy, the probes),
:mod:`.train` (the LoRA loop, one step, the KL term, checkpoints, lineage), :mod:`.report`
(metrics.json, report.md, plots, seeds aggregated), :mod:`.loop` (the loop's acting, consolidation,
state and report), :mod:`.model` (finding and loading the base model). Components never import a
recipe.

Heavy dependencies (torch, transformers, peft) are imported inside the functions that need them.
"""
