"""Which generations' successes a consolidation trains on (the lineage), for the loop.

Generations are numbered from 1 (generation 0 holds the seeded demonstrations, which every
consolidation trains on). Consolidation ``g`` always trains on generation ``g``'s successes;
``window`` adds the ``K - 1`` generations before it, ``all`` every earlier one, ``best`` the
``K - 1`` earlier generations whose **acting model scored best on the validation split** (the
model that produced a generation's data is the adapter of the generation before it; generation
1 acted with the base model). Validation tasks are held-out tasks disjoint from the evaluation
tasks (:func:`split_heldout`), so the evaluation set never steers training. This is
:func:`replaybank.llm.train.lineage.select_lineage` (the main job's rule) shifted to 1-based
generations.
"""

from __future__ import annotations

from collections.abc import Sequence

from replaybank.episodic import Task
from replaybank.llm.config import Lineage
from replaybank.llm.train.lineage import select_lineage


def lineage_for(generation: int, window: int, policy: Lineage, validation: Sequence[float] = ()) -> list[int]:
    """The generations (1-based) consolidation ``generation`` trains on, ascending.

    Args:
        generation: the current generation, >= 1.
        window: K.
        policy: ``window``, ``all`` or ``best``.
        validation: ``validation[j]`` = validation score (higher is better) of the model that
            acted in generation ``j + 1`` (index 0: the base model); needed for ``best``.

    Raises:
        ValueError: ``generation < 1``, or ``best`` without a score for each earlier generation.

    Example:
        >>> lineage_for(5, 3, "window"), lineage_for(5, 3, "all")
        ([3, 4, 5], [1, 2, 3, 4, 5])
        >>> lineage_for(4, 2, "best", validation=[0.1, 0.9, 0.5])   # generation 2 acted best
        [2, 4]
    """
    if generation < 1:
        raise ValueError(f"loop generations start at 1, got {generation}")
    scores = list(validation[: generation - 1]) if policy == "best" else None
    if policy == "best" and len(scores or ()) < generation - 1:
        raise ValueError(
            f"lineage 'best' needs a validation score for each of the {generation - 1} earlier generations, "
            f"got {len(validation)}"
        )
    return [g + 1 for g in select_lineage(generation - 1, window, policy, scores)]


def split_heldout(tasks: Sequence[Task], n_eval: int) -> tuple[list[Task], list[Task]]:
    """``(evaluation, validation)``: the first ``n_eval`` held-out tasks, and the rest.

    Raises:
        ValueError: when a task id would be in both (the task source repeated a task).

    Example:
        >>> ts = [Task(str(i), f"t{i}") for i in range(5)]
        >>> [[t.id for t in part] for part in split_heldout(ts, 3)]
        [['0', '1', '2'], ['3', '4']]
    """
    evaluation, validation = list(tasks[:n_eval]), list(tasks[n_eval:])
    shared = {t.id for t in evaluation} & {t.id for t in validation}
    if shared:
        raise ValueError(f"validation and evaluation tasks overlap ({sorted(shared)[:3]}); the task source repeats tasks")
    return evaluation, validation
