"""The operating-point keys: ``[evaluation] choose``, ``scales``, ``scale_profiles``, ``keep_skill``
and ``checkpoints``, checked together.

``choose = "floor"`` measures each trained arm at every post-hoc scale on the validation split
(:mod:`replaybank.llm.eval.operating`), so it needs ``[data] validation_suite``; ``scales`` are
factors in (0, 2], ``scale_profiles`` are ``uniform`` and/or ``depth``; ``keep_skill`` (in [0, 1])
and ``checkpoints`` (an integer >= 0) have their ranges checked by the schema. Any of them set under ``choose = "last"`` would do nothing and
is refused. A bad value is a :class:`ConfigError` naming the file, its line (when the config came
from a file) and the key.

Example:
    >>> check_choose_keys("floor", [0.5, 1.0], ["uniform"], "builtin:validation", set(), "run.toml", None)
    >>> check_choose_keys("floor", [0.5, 2.5], ["uniform"], "builtin:validation", set(), "run.toml", "[evaluation]\\nchoose = 'floor'\\nscales = [0.5, 2.5]\\n")
    Traceback (most recent call last):
    ...
    replaybank.llm.config.ConfigError: run.toml:3: [evaluation] scales = [0.5, 2.5]: 2.5 is outside (0, 2]; a scale multiplies the adapter's update (0: the base model, 1: as trained)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from replaybank.llm.config.values import ConfigError, at, did_you_mean

__all__ = ["CHOSEN_BY_FLOOR", "MAX_SCALE", "check_choose_keys"]

MAX_SCALE = 2.0
PROFILES = ("uniform", "depth")
#: the keys only ``choose = "floor"`` reads
CHOSEN_BY_FLOOR = ("scales", "scale_profiles", "keep_skill", "checkpoints")


def check_choose_keys(
    choose: str, scales: Sequence[float], profiles: Sequence[str], validation_suite: str, explicit: set[str] | frozenset[str],
    source: str, text: str | None,
) -> None:
    """Check the operating-point keys against each other and ``[data] validation_suite``.

    Args:
        choose: ``last`` or ``floor`` (its spelling already checked).
        scales, profiles: ``[evaluation] scales`` and ``scale_profiles``.
        validation_suite: ``[data] validation_suite``.
        explicit: the ``section.key`` names the config sets.
        source, text: the config's file name and text (None: no line in messages).

    Raises:
        ConfigError: a scale outside (0, 2] or repeated, no scale, an unknown or repeated profile,
            ``choose = "floor"`` with no validation suite, or one of :data:`CHOSEN_BY_FLOOR` set under
            ``choose = "last"``.
    """
    def where(key: str, section: str = "evaluation") -> str:
        return at(source, text, section, key)

    if choose != "floor":
        for key in CHOSEN_BY_FLOOR:
            if f"evaluation.{key}" in explicit:
                raise ConfigError(f"{where(key)}: [evaluation] {key} is set but [evaluation] choose = {choose!r} never reads it; "
                                  "set choose = \"floor\" or remove the key")
        return
    if not scales:
        raise ConfigError(f"{where('scales')}: [evaluation] scales is empty; give at least one scale in (0, {MAX_SCALE:g}]")
    for s in scales:
        if not (math.isfinite(s) and 0 < s <= MAX_SCALE):
            raise ConfigError(f"{where('scales')}: [evaluation] scales = {list(scales)}: {s!r} is outside (0, {MAX_SCALE:g}]; "
                              "a scale multiplies the adapter's update (0: the base model, 1: as trained)")
    if len(set(scales)) != len(scales):
        raise ConfigError(f"{where('scales')}: [evaluation] scales = {list(scales)} lists a scale twice; list each once")
    if not profiles:
        raise ConfigError(f"{where('scale_profiles')}: [evaluation] scale_profiles is empty; expected uniform and/or depth")
    for p in profiles:
        if p not in PROFILES:
            raise ConfigError(f"{where('scale_profiles')}: [evaluation] scale_profiles contains {p!r}; expected uniform "
                              f"and/or depth{did_you_mean(p, PROFILES)}")
    if len(set(profiles)) != len(profiles):
        raise ConfigError(f"{where('scale_profiles')}: [evaluation] scale_profiles = {list(profiles)} lists a profile twice")
    if not validation_suite:
        line = where("validation_suite", "data") if "data.validation_suite" in explicit else where("choose")
        raise ConfigError(f"{line}: [evaluation] choose = \"floor\" chooses on the validation split, but [data] "
                          "validation_suite is empty; set it (builtin:validation or a JSONL file) or choose = \"last\"")
