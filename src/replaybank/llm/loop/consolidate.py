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

Adapters are saved per generation as ``adapter.safetensors`` (LoRA tensors only, loaded back with
``safetensors``, never pickle) next to ``adapter.json`` (its SHA-256, generation, lineage).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from replaybank.episodic import EpisodeStore
from replaybank.errors import ReplayBankError
from replaybank.llm.config import Recipe, Training
from replaybank.llm.data.rows import TokenRows


class AdapterError(ReplayBankError):
    """A saved adapter is missing, damaged or does not fit the model."""


def domain_rows(
    store: EpisodeStore, tokenizer: Any, generations: list[int], max_seq_length: int, system: str = ""
) -> tuple[TokenRows, int]:
    """Tokenized successes of ``generations`` plus the demonstrations (after ``system`` when given);
    and how many rows."""
    from replaybank.episodic.export import encode_rows, training_rows

    rows = training_rows(store, generations=generations, include_demos=True)
    if system:
        rows = [{**r, "messages": [{"role": "system", "content": system}, *r["messages"]]} for r in rows]
    return encode_rows(tokenizer, rows, max_seq_length), len(rows)


def rehearsal_rows(
    source: str, model: Any, tokenizer: Any, *, seed: int, n_rows: int, max_seq_length: int,
    suite_prompts: list[str], batch_size: int, keep_truncated: bool = False,
) -> tuple[TokenRows | None, dict[str, Any]]:
    """The rehearsal rows: ``self`` (synthesized by the base model, cached), a JSONL file, or none.

    ``keep_truncated`` (self only) keeps the base model's answers cut at the token budget as open
    rows (no end of turn) instead of dropping them (see
    :func:`replaybank.llm.data.selfsynth.synthesize`).

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


def consolidate(
    model: Any, pad_id: int, domain: TokenRows, rehearsal: TokenRows | None, recipe: Recipe | None, cfg: Training,
    *, desc: str, checkpoint_dir: Path | None = None,
) -> dict[str, Any]:
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

    Returns:
        The training log (:meth:`replaybank.llm.train.TrainLog.to_dict`) without per-step rows,
        plus ``loss_first``/``loss_last``, ``steps``, ``kl_weight`` and ``kl_mean`` (the mean
        per-token KL over the steps; None without the term).
    """
    from replaybank.llm.train import KLSpec, Source, train_lora

    spec = recipe if recipe is not None else Recipe(source=[], ratio=0.0)
    sources = [Source("rehearsal", rehearsal, spec.ratio)] if rehearsal is not None and spec.ratio > 0 else []
    kl = KLSpec.from_recipe(spec)
    if kl is not None and kl.on == "rehearsal" and not sources:
        kl = None
    log = train_lora(model, pad_id, domain, None, cfg, 0.0, checkpoint_dir=checkpoint_dir, desc=desc, sources=sources,
                     mix_by=spec.mix_by, kl=kl)
    out = log.to_dict()
    steps = out.pop("steps")
    kls = [s["kl"] for s in steps if s.get("kl") is not None]
    out.update({
        "steps": len(steps),
        "loss_first": steps[0]["loss"] if steps else None,
        "loss_last": steps[-1]["loss"] if steps else None,
        "rehearsal_rows": sum(s["rehearsal_rows"] for s in steps),
        "rows": sum(s["rows"] for s in steps),
        "kl_weight": kl.weight if kl is not None else 0.0,
        "rehearsal_ce": (kl.rehearsal_ce if kl is not None else True) and sources != [],
        "kl_mean": sum(kls) / len(kls) if kls else None,
    })
    out.pop("evals", None)
    return out


def save_adapter(model: Any, folder: Path, meta: dict[str, Any]) -> str:
    """Write the LoRA tensors as ``adapter.safetensors`` (atomically) and ``adapter.json``; return the hash."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in get_peft_model_state_dict(model).items()}
    tmp = folder / "adapter.safetensors.tmp"
    save_file(state, str(tmp))
    digest = _sha256(tmp)
    os.replace(tmp, folder / "adapter.safetensors")
    (folder / "adapter.json.tmp").write_text(json.dumps({**meta, "sha256": digest}, indent=1))
    os.replace(folder / "adapter.json.tmp", folder / "adapter.json")
    return digest[:16]


def load_adapter(model: Any, folder: Path) -> str:
    """Load ``adapter.safetensors`` into the PEFT ``model``; return its hash (as recorded).

    Raises:
        AdapterError: missing or damaged file, a hash that does not match ``adapter.json``, or
            tensors that do not fit the model.
    """
    from peft import set_peft_model_state_dict
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path, meta_path = folder / "adapter.safetensors", folder / "adapter.json"
    if any(p.is_symlink() for p in (folder, path, meta_path)):
        raise AdapterError(f"{folder}: the saved adapter is a symbolic link; a run folder holds its own files")
    if not path.is_file() or not meta_path.is_file():
        raise AdapterError(f"{folder}: no saved adapter (adapter.safetensors and adapter.json); delete state.json to restart")
    digest = _sha256(path)
    recorded = json.loads(meta_path.read_text()).get("sha256")
    if recorded != digest:
        raise AdapterError(f"{path}: sha256 {digest[:16]} does not match adapter.json ({str(recorded)[:16]}); the file changed")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise AdapterError(f"{path}: not a readable safetensors file ({exc})") from None
    result = set_peft_model_state_dict(model, state)
    unexpected = getattr(result, "unexpected_keys", None) or []
    if unexpected:
        raise AdapterError(f"{path}: tensors that are not in this model's adapter: {unexpected[:3]}")
    return digest[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
