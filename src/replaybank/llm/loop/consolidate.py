"""Consolidation: the successes of the lineage's generations trained into the LoRA adapter.

The domain rows are :func:`replaybank.episodic.export.training_rows` of the selected generations
(demonstrations included; each distinct task + output once), tokenized completion-only without
the replayed examples the agent saw, under the agent's system prompt
(:func:`replaybank.episodic.export.encode_rows`). The system prompt gates the skill: rehearsal
rows keep the model's default behaviour (under its default system prompt), the tool calls are
learnt under the tool prompt, so general answers are not turned into tool calls. Rehearsal rows are
the main job's self-synthesized rehearsal (:mod:`replaybank.llm.data.selfsynth`: the base model's
own answers to general prompts, cached per seed) or a user's JSONL of ``{prompt, response}`` rows,
mixed in by the run's rehearsal recipe (:class:`replaybank.llm.config.Recipe`: its share of the
rows or tokens of every batch, its KL-to-base term, cross-entropy on the rows or not) by
:class:`replaybank.mixing.Mixer` inside the one LoRA training loop
(:func:`replaybank.llm.train.train_lora`).

Adapters are saved per generation as PEFT folders (``adapter_model.safetensors``,
``adapter_config.json``: ``PeftModel.from_pretrained`` loads them) with ``replaybank.json`` (its
SHA-256, generation, lineage); loaded back with ``safetensors``, never pickle. Runs saved before
(``adapter.safetensors`` + ``adapter.json``) still resume.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replaybank.episodic import EpisodeStore
from replaybank.errors import ReplayBankError
from replaybank.llm.config import Recipe, Training
from replaybank.llm.config.loop import Consolidate
from replaybank.llm.data.rows import TokenRows
from replaybank.llm.records import Absent, JsonObject, Record, absent, omitted
from replaybank.llm.train.peft_files import (
    MANIFEST,
    WEIGHTS,
    AdapterError,
    check_tensors,
    read_json_object,
    read_tensors,
    sha256_file,
    write_adapter_folder,
)

__all__ = ["AdapterError", "ConsolidationLog", "consolidate", "domain_rows", "load_adapter", "rehearsal_rows", "save_adapter"]


def domain_rows(
    store: EpisodeStore, tokenizer: Any, generations: list[int], max_seq_length: int, system: str = "",
    *, consolidate: Consolidate = "successes", levels: Sequence[str] = ("episodes",), k: int = 0, budget: int = 0,
) -> tuple[TokenRows, int]:
    """Tokenized successes of ``generations`` plus the demonstrations (after ``system`` when given);
    and how many rows.

    ``consolidate`` is ``[loop] consolidate``: ``successes`` keeps every successful episode;
    ``own`` leaves out the replayed ones (stored workflows run without the model), so the rows
    are the model's own successes and the demonstrations; ``insights`` keeps every success and
    puts the insights retrieved for its task into its system message, as an acting prompt
    would show them now: ``levels`` (``[loop] retrieve``) filled in order, ``k``
    (``context_examples``) of each, within ``budget`` characters (``context_chars``; see
    :func:`replaybank.llm.loop.context.pick`), the other levels' items left out of the row.
    """
    from replaybank.episodic.export import encode_rows, training_rows

    rows = training_rows(store, generations=generations, include_demos=True, include_replayed=consolidate != "own")
    if system:
        rows = [{**r, "messages": [{"role": "system", "content": system}, *r["messages"]]} for r in rows]
    if consolidate == "insights":
        rows = _with_insights(store, rows, levels, k, budget)
    return encode_rows(tokenizer, rows, max_seq_length), len(rows)


def _with_insights(
    store: EpisodeStore, rows: list[dict[str, Any]], levels: Sequence[str], k: int, budget: int,
) -> list[dict[str, Any]]:
    """``rows`` with the insights an acting prompt shows for each row's task in its system message."""
    from replaybank.llm.loop.context import LevelRetriever, add_lessons, pick

    retriever = LevelRetriever.from_store(store, levels)
    out = []
    for row in rows:
        recall = retriever.recall(store.get(row["episode_id"]).episode.task, k)
        lessons = pick(recall, budget=budget, levels=levels).lessons
        out.append({**row, "messages": add_lessons(row["messages"], lessons)} if lessons else row)
    return out


def rehearsal_rows(
    source: str, model: Any, tokenizer: Any, *, seed: int, n_rows: int, max_seq_length: int,
    suite_prompts: list[str], batch_size: int, keep_truncated: bool = False,
) -> tuple[TokenRows | None, dict[str, Any]]:
    """The rehearsal rows: ``self`` (synthesized by the base model, cached), a JSONL file, or none.

    ``keep_truncated`` (self only) keeps the base model's answers cut at the token budget as open
    rows (no end of turn) instead of dropping them (see
    :func:`replaybank.llm.data.selfsynth.synthesize`).

    The manifest's ``sha256`` is a hash of the rows' text (prompts, responses, open flags).

    Raises:
        ReplayBankError: a JSONL line that is not an object with string ``prompt`` and
            ``response`` (``file:line``), an empty file, or self-synthesis that kept no row.
    """
    from replaybank.llm.data.rows import encode_pair, token_rows

    if source == "none":
        return None, {"source": "none"}
    if source == "self":
        from replaybank.llm.data.selfsynth import synthesize
        from replaybank.llm.model import cache_dir

        rows, manifest = synthesize(
            model, tokenizer, seed=seed, n_rows=n_rows, cache_dir=cache_dir() / "selfsynth",
            exclude=suite_prompts, batch_size=batch_size, keep_truncated=keep_truncated,
        )
        manifest = {"source": "self", **{k: manifest.get(k) for k in ("kept", "open", "generated", "cached", "cache")}}
    else:
        rows = read_rehearsal_file(Path(source))
        manifest = {"source": source, "kept": len(rows)}
    encoded = token_rows([encode_pair(tokenizer, r["prompt"], r["response"], max_seq_length, open_end=bool(r.get("open")))
                          for r in rows])
    # the rows' content hash: a resume refuses rows changed under the same source (state.check_inputs)
    manifest["sha256"] = hashlib.sha256(json.dumps(rows, sort_keys=True).encode("utf-8")).hexdigest()
    return encoded, manifest


def read_rehearsal_file(path: Path) -> list[dict[str, str]]:
    """The ``{prompt, response}`` rows of a JSONL rehearsal file.

    Raises:
        ReplayBankError: a line that is not an object with string ``prompt`` and ``response``
            (``file:line``), an unreadable or empty file.
    """
    from replaybank.jsonl import iter_jsonl

    rows = []
    for lineno, obj in iter_jsonl(path, error=ReplayBankError):
        if not isinstance(obj.get("prompt"), str) or not isinstance(obj.get("response"), str):
            raise ReplayBankError(f"{path}:{lineno}: a rehearsal row needs string 'prompt' and 'response'")
        rows.append({"prompt": obj["prompt"], "response": obj["response"]})
    if not rows:
        raise ReplayBankError(f"{path}: no rehearsal rows")
    return rows


#: rows of each source a replay controller measures in the loop (held out of the rehearsal rows;
#: a seeded sample of the domain rows, which are few: the skill being learnt) and evaluations per
#: consolidation (plus one before the first step)
STEER_ROWS, STEER_POINTS = 16, 4


@dataclass(frozen=True, kw_only=True)
class ConsolidationLog(Record):
    """What one consolidation trained: a generation's ``train`` object in ``state.json``, its keys
    in this order (the LoRA loop's log, :meth:`replaybank.llm.train.TrainLog.to_dict`, without its
    per-step rows and evaluations, then the consolidation's own figures)."""

    tokens: int
    seconds: float
    tokens_per_second: float | None
    resumed_from_step: int
    projected_share: float | None | Absent = absent()
    """A-GEM only: the share of the steps with rehearsal rows whose domain gradient was projected."""
    refreshes: list[JsonObject] | None = omitted()
    """One per rewrite of a source's rows (``selfgen``); left out when nothing was rewritten."""
    steps: int
    loss_first: float | None
    """The first step's loss (cross-entropy); None without steps."""
    loss_last: float | None
    rehearsal_rows: int
    """Rehearsal rows drawn, over every step."""
    rows: int
    """Rows drawn (domain and rehearsal), over every step."""
    kl_weight: float
    rehearsal_ce: bool
    """Whether rehearsal rows trained with cross-entropy (false without rehearsal rows)."""
    kl_mean: float | None
    """The mean per-token KL-to-base over the steps; None without the term."""
    mixture: list[JsonObject] | None = omitted()
    """A replay controller's mixture after each evaluation; only when steered."""


def consolidate(
    model: Any, pad_id: int, domain: TokenRows, rehearsal: TokenRows | None, recipe: Recipe | None, cfg: Training,
    *, desc: str, checkpoint_dir: Path | None = None, controller: Any = None, steps: int = 0,
) -> ConsolidationLog:
    """Train the PEFT ``model`` in place on ``domain`` mixed with ``rehearsal`` by ``recipe``.

    The recipe's ``ratio`` of the rows (or labelled tokens, ``mix_by``) of every batch are
    rehearsal rows. With ``kl_to_base > 0`` the loss adds that weight times the KL-to-base term
    (:mod:`replaybank.llm.train.kl`: ``KL(p_base || p_adapted)`` per answer token of the
    rehearsal rows, averaged over them; the base distribution comes from the same model with the
    adapter disabled). It pulls the whole next-token distribution on general prompts back to the
    base model's, where the rehearsal rows' cross-entropy pulls only toward one sampled answer.
    With ``rehearsal_ce = false`` the rehearsal rows train through the KL term only
    (:attr:`replaybank.llm.train.KLSpec.rehearsal_ce`). ``recipe=None`` (or no rehearsal rows):
    the domain alone (a KL term on rehearsal rows is then inactive).

    With a replay ``controller`` (:func:`replaybank.llm.config.controller.recipe_controller`) the
    rehearsal share is steered (:class:`replaybank.llm.train.Steering`): :data:`STEER_ROWS` rehearsal
    rows are held out of training, and their loss and that of a seeded sample of the domain rows
    are measured before the first step and at :data:`STEER_POINTS` points.

    ``steps`` (``[loop] consolidation_steps``) > 0 trains exactly that many optimizer steps, however
    many rows there are: the rows are passed over as many times as it takes (every pass takes at
    least one step) and training stops at ``steps``; the passes draw the same batches in the
    same order as without it. 0: ``cfg.num_train_epochs`` passes.

    Returns:
        What it trained (:class:`ConsolidationLog`).
    """
    from replaybank.llm.train import KLSpec, Source, train_lora

    spec = recipe if recipe is not None else Recipe(source=[], ratio=0.0)
    sources = [Source("rehearsal", rehearsal, spec.ratio)] if rehearsal is not None and spec.ratio > 0 else []
    kl = KLSpec.from_recipe(spec)
    if kl is not None and kl.on == "rehearsal" and not sources:
        kl = None
    steer, kept = _steering(controller, spec, model, pad_id, domain, rehearsal, cfg.seed) if sources else (None, None)
    if steer is not None and kept is not None:
        sources = [Source(steer.trained[0], kept, spec.ratio)]
    if steps > 0:
        cfg = dataclasses.replace(cfg, num_train_epochs=steps)
    log = train_lora(model, pad_id, domain, cfg, checkpoint_dir=checkpoint_dir, desc=desc, sources=sources,
                     mix_by=spec.mix_by, kl=kl, steer=steer, eval_points=STEER_POINTS if steer else 1,
                     max_steps=steps or None)
    taken = log.steps
    kls = [s["kl"] for s in taken if s.get("kl") is not None]
    head = {k: v for k, v in log.to_dict().items() if k not in ("steps", "evals")}  # the log's own figures, rounded there
    return ConsolidationLog(
        **head,
        steps=len(taken),
        loss_first=taken[0]["loss"] if taken else None,
        loss_last=taken[-1]["loss"] if taken else None,
        rehearsal_rows=sum(s["rehearsal_rows"] for s in taken),
        rows=sum(s["rows"] for s in taken),
        kl_weight=kl.weight if kl is not None else 0.0,
        rehearsal_ce=(kl.rehearsal_ce if kl is not None else True) and sources != [],
        kl_mean=sum(kls) / len(kls) if kls else None,
        mixture=steer.trajectory if steer is not None else None,
    )


def _steering(controller: Any, spec: Recipe, model: Any, pad_id: int, domain: TokenRows, rehearsal: TokenRows | None,
              seed: int) -> tuple[Any, TokenRows | None]:
    """The loop's steering (the losses it measures: see :func:`consolidate`) and the rehearsal rows
    it trains (all but the held-out ones); ``(None, None)`` without a controller."""
    import numpy as np

    from replaybank.llm.data.rows import token_rows
    from replaybank.llm.eval.losses import mean_loss
    from replaybank.llm.train import Steering

    if controller is None or rehearsal is None:
        return None, None
    held = min(STEER_ROWS, len(rehearsal) // 4)  # a small pool keeps most of its rows for training
    if held < 1:
        raise ReplayBankError(f"a replay controller needs held-out rehearsal rows, but there are {len(rehearsal)} rows")
    n = len(rehearsal)
    train_rows, held_rows = token_rows(rehearsal.rows(np.arange(n - held))), token_rows(rehearsal.rows(np.arange(n - held, n)))
    pick = np.random.default_rng(seed).permutation(len(domain))[:STEER_ROWS]
    dom_rows = token_rows(domain.rows(np.sort(pick)))

    def measure(step: int) -> list[float]:
        return [mean_loss(model, dom_rows, pad_id), mean_loss(model, held_rows, pad_id)]

    return Steering(controller, [spec.source[0]], measure, k=spec.trend_window), train_rows


def save_adapter(model: Any, folder: Path, meta: dict[str, Any]) -> str:
    """Write the adapter into ``folder`` as a PEFT folder (``adapter_model.safetensors``,
    ``adapter_config.json``) with ``replaybank.json`` (``meta`` plus the weights' SHA-256); return
    the hash's first 16 digits. See :mod:`replaybank.llm.train.peft_files`.

    Raises:
        UnsafePathError: a symbolic link (or a FIFO, a folder) at a file name written here.
    """
    return write_adapter_folder(model, folder, meta)[:16]


#: (weights, manifest) of an adapter folder: the PEFT layout, then the loop's older own layout
LAYOUTS = ((WEIGHTS, MANIFEST), ("adapter.safetensors", "adapter.json"))


def load_adapter(model: Any, folder: Path, *, expected: str | None = None, generation: int | None = None) -> str:
    """Load the adapter saved in ``folder`` into the PEFT ``model``; return its hash (as recorded).

    Reads the PEFT layout (``adapter_model.safetensors`` + ``replaybank.json``) and, to resume runs
    written before it, the old one (``adapter.safetensors`` + ``adapter.json``). Everything is
    checked before the model is touched: the files are regular files (no links), the manifest is an
    object with a SHA-256 that the file matches, that hash is ``expected`` (the one ``state.json``
    recorded for this generation) and its ``generation`` is ``generation``, and the tensors are
    exactly the model's adapter tensors: the same names and shapes, floating point, finite.

    Raises:
        AdapterError: missing, linked or damaged files, a hash that does not match the manifest
            or ``expected`` (an adapter copied from another generation), tensors missing, extra,
            of another shape or not finite.
    """
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    names = next(((w, m) for w, m in LAYOUTS if (folder / w).is_file() or (folder / w).is_symlink()), LAYOUTS[0])
    path, meta_path = folder / names[0], folder / names[1]
    if any(p.is_symlink() for p in (folder.parent, folder, path, meta_path)):
        raise AdapterError(f"{folder}: the saved adapter is a symbolic link; a run folder holds its own files")
    if not path.is_file() or not meta_path.is_file():
        raise AdapterError(f"{folder}: no saved adapter ({WEIGHTS} and {MANIFEST}, or adapter.safetensors and "
                           "adapter.json in older run folders); delete state.json to restart")
    meta = _read_meta(meta_path)
    digest = sha256_file(path)
    if meta["sha256"] != digest:
        raise AdapterError(f"{path}: sha256 {digest[:16]} does not match {meta_path.name} ({meta['sha256'][:16]}); the file changed")
    if expected is not None and digest[:16] != expected:
        raise AdapterError(
            f"{path}: holds adapter {digest[:16]}, but state.json records {expected} for this generation; "
            "the adapter was replaced (copied from another generation?): restore it or delete the run folder"
        )
    if generation is not None and meta.get("generation", generation) != generation:
        raise AdapterError(f"{meta_path}: is generation {meta.get('generation')!r}'s adapter, expected {generation}'s")
    state = read_tensors(path)
    mine = get_peft_model_state_dict(model)
    check_tensors(path, state, mine)
    set_peft_model_state_dict(model, state)
    return digest[:16]


def _read_meta(path: Path) -> dict[str, Any]:
    """The adapter's manifest: an object with a 64-hex ``sha256``."""
    meta = read_json_object(path, "the adapter's manifest")
    digest = meta.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise AdapterError(f"{path}: field 'sha256' is not 64 hex digits; delete state.json to restart")
    return meta
