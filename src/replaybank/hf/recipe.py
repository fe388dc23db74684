"""Naming a rehearsal recipe in ``replaybank.hf``: the same recipes as ``replaybank run`` and
``replaybank loop`` (:class:`replaybank.llm.config.Recipe`).

:func:`recipe` gives a built-in recipe by name (``self-distill``, ``rehearsal-corpus``, ...) or a
``[recipes.NAME]`` table of a config file; :class:`replaybank.hf.MixSpec` (for
:func:`replaybank.hf.mix` and the torch datasets) takes its share with ``recipe=``, and
:meth:`replaybank.hf.KLToBase.from_recipe` its KL term and its ``rehearsal_ce``. The recipe's ``source`` says what the rehearsal rows should be (``self``:
the base model's own answers to general prompts; ``corpus``: general text); here you pass those
rows yourself.

Example:
    >>> r = recipe("self-distill")
    >>> r.ratio, r.mix_by, r.kl_to_base, r.rehearsal_ce
    (0.5, 'rows', 3.0, False)
    >>> share(None, None, "rehearsal-corpus")
    (0.1, 'rows')
    >>> share(0.2, None, "self-distill")
    Traceback (most recent call last):
    ...
    replaybank.hf.plan.MixError: give ratio= (and mix_by=) or recipe=, not both: recipe 'self-distill' sets ratio 0.5 and mix_by 'rows'
"""

from __future__ import annotations

from pathlib import Path

from replaybank.hf.plan import MixBy, MixError
from replaybank.llm.config.recipe import Recipe, builtin, load_recipes, resolve

__all__ = ["Recipe", "recipe", "share"]


def recipe(name: str, config: str | Path | None = None) -> Recipe:
    """The rehearsal recipe ``name``: a ``[recipes.NAME]`` table of the TOML
    file ``config`` when given (a ``replaybank run`` or ``replaybank loop`` config), else a
    built-in one (docs/llm.md, "Rehearsal recipes"). ``"none"`` is no rehearsal (ratio 0).

    Raises:
        ConfigError: an unknown name (with a "did you mean"), or a bad table in ``config``
            (``file:line``).
    """
    declared = load_recipes(config) if config is not None else {}
    spec = resolve(name, declared, str(config) if config is not None else "replaybank.hf.recipe", "recipe")
    return spec if spec is not None else builtin("naive")


def share(ratio: float | None, mix_by: MixBy | None, named: Recipe | str | None) -> tuple[float, MixBy]:
    """The rehearsal share and what it is a share of: ``ratio`` and ``mix_by`` (default rows),
    or the recipe's.

    Raises:
        MixError: neither ``ratio`` nor a recipe, or both.
    """
    if named is None:
        if ratio is None:
            raise MixError("give ratio= (the rehearsal share of every batch, in [0, 1)) or recipe=")
        return ratio, mix_by if mix_by is not None else "rows"
    spec = recipe(named) if isinstance(named, str) else named
    if ratio is not None or mix_by is not None:
        label = repr(named) if isinstance(named, str) else "recipe"
        raise MixError(
            f"give ratio= (and mix_by=) or recipe=, not both: recipe {label} sets ratio {spec.ratio:g} "
            f"and mix_by {spec.mix_by!r}"
        )
    return spec.ratio, spec.mix_by
