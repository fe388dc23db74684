"""The LLM jobs, one module each, read top to bottom (set up, train, evaluate, report):

* :mod:`.rehearsal`: the main job, ``replaybank run`` (every arm over every seed, the report);
* :mod:`.interference`: ``replaybank probe`` (gradient interference of domain and rehearsal rows);
* :mod:`.loop`: ``replaybank loop`` (act, record, consolidate, evaluate; several runs as a grid).

Recipes import components, never each other; no component imports a recipe (``tests/test_layout.py``).
"""
