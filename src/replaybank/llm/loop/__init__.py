"""The consolidation loop (``replaybank loop``): act with replayed experience, record, consolidate, evaluate.

* :mod:`.config`: ``[loop]`` and ``[training]`` keys, validated.
* :mod:`.act`: prompts with BM25-retrieved successes, batched generation cut at the call's end, checking.
* :mod:`.lineage`: which generations a consolidation trains on (window / all / best on validation).
* :mod:`.consolidate`: LoRA training on successes mixed with rehearsal; adapters as safetensors.
* :mod:`.state`: the resumable per-generation state.
* :mod:`.run`: one run, generation by generation; :mod:`.grid`: lineages x rehearsal x seeds.
* :mod:`.report`: tables, seeds aggregated, plots.
"""
