"""The consolidation loop's components (the recipe is :mod:`replaybank.llm.recipes.loop`, the command
``replaybank loop``): act with replayed experience, record, consolidate, evaluate.

* :mod:`.config`: ``[loop]`` and ``[training]`` keys, validated.
* :mod:`.tasks`: where tasks come from (the built-in qx ladder or a JSONL file).
* :mod:`.act`: prompts with BM25-retrieved successes, batched generation cut at the call's end, checking.
* :mod:`.replay`: record-and-replay: workflows learned from successes, replayed without the model.
* :mod:`.lineage`: which generations a consolidation trains on (window / all / best on validation).
* :mod:`.consolidate`: LoRA training on successes mixed with rehearsal; adapters as safetensors.
* :mod:`.state`: the resumable per-generation state.
* :mod:`.grid`: the runs of lineages x rehearsal x seeds, each in its own folder.
* :mod:`.report`: tables, seeds aggregated, plots.
* :mod:`.summary`: the report's ``metrics.json``, typed.
"""
