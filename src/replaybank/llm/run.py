"""The experiment: base, naive and rehearsal arms, measured before and after, then the report.

Order of calls (one job per step):

1. validate the config, pick the device, load the base model and tokenizer;
2. :func:`replaybank.llm.data_prep.prepare` the rehearsal pool, held-out sets, domain data, probe;
3. measure the ``base`` arm;
4. per trained arm, per generation: add/continue the LoRA adapter, train on the lineage's domain
   data (plus the rehearsal quota for ``rehearsal``), measure;
5. write ``metrics.json``, ``report.md`` and ``losses.png``.

Everything is written into ``OUT.partial/`` and renamed to ``OUT`` at the very end, so an
interrupted run never leaves an output folder that looks complete; a rerun with the same config
resumes the arms' checkpoints from ``OUT.partial/``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import platform
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.errors import ReplayBankError
from replaybank.llm.config import Config
from replaybank.llm.data_prep import Prepared, prepare
from replaybank.llm.evaluate import mean_loss, probe_score
from replaybank.llm.generations import select_lineage
from replaybank.llm.report import (
    METRICS_SCHEMA_VERSION,
    PLOT_NAME,
    effect,
    plot_losses,
    write_metrics,
    write_report,
)
from replaybank.llm.rows import TokenRows, token_rows
from replaybank.llm.train import add_lora, train_lora

Log = Callable[[str], None]


class OutputError(ReplayBankError):
    """The output folder cannot be used."""


def resolve_threads(setting: int, load: float | None) -> int:
    """Torch CPU threads for ``num_threads = setting`` (0 = auto).

    Auto uses every CPU on an idle machine and 1 thread otherwise: with other processes running,
    multi-threaded torch slowed the 2-CPU development machine 5-13x (threads wait for each other
    while one is descheduled), while 1 thread kept about 120 tokens/s of LoRA training.

    Example:
        >>> resolve_threads(3, 5.0), resolve_threads(0, 4.0)
        (3, 1)
    """
    if setting > 0:
        return setting
    cpus = os.cpu_count() or 1
    return cpus if load is not None and load < 0.5 else 1


def pick_device(setting: str) -> str:
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise ValueError("[training] device = 'cuda' but no CUDA device is available")
    return setting


def _check_out_dir(out: Path) -> None:
    if out.exists() and not (out / "metrics.json").is_file() and any(out.iterdir()):
        raise OutputError(f"{out}: exists and is not a replaybank run folder (no metrics.json); choose another --out")


def _partial_dir(out: Path, cfg: Config) -> Path:
    partial = out.with_name(out.name + ".partial")
    key = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()
    stamp = partial / "config.sha256"
    if partial.exists() and (not stamp.is_file() or stamp.read_text().strip() != key):
        shutil.rmtree(partial)  # leftovers of a run with another config cannot be resumed
    partial.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key)
    return partial


def _concat(parts: list[TokenRows]) -> TokenRows:
    if len(parts) == 1:
        return parts[0]
    return token_rows([r for p in parts for r in p.rows(np.arange(len(p)))])


def _measure(model: Any, tokenizer: Any, data: Prepared, pad_id: int, with_probe: bool) -> dict[str, float]:
    out = {
        "general_loss": mean_loss(model, data.general_eval, pad_id),
        "domain_loss": mean_loss(model, data.domain_eval, pad_id),
    }
    if with_probe:
        probe = probe_score(model, tokenizer, data.probe, pad_id)
        out["probe_score"] = probe["exact_match"]
        out["probe_logprob"] = probe["answer_logprob"]
    return out


def run_experiment(cfg: Config, out: Path | None = None, log: Log = print, max_steps: int | None = None) -> dict[str, Any]:
    """Run every configured arm and write the report; returns the metrics dict.

    Args:
        cfg: a validated config.
        out: output folder (default ``cfg.output.out_dir``).
        log: where progress lines go.
        max_steps: optional cap on optimizer steps per arm and generation (smoke tests).

    Raises:
        ConfigError, CorpusError, ModelError, OutputError: bad input, before any training starts.
    """
    import torch

    from replaybank.llm.model import check_target_modules, load_model

    wall0 = time.perf_counter()
    load_start = _loadavg()
    if load_start is not None and load_start > (os.cpu_count() or 1):
        log(f"note: load average {load_start} on {os.cpu_count()} CPUs; other processes will slow this run")
    out = Path(out if out is not None else cfg.output.out_dir)
    _check_out_dir(out)
    t = cfg.training
    torch.set_num_threads(resolve_threads(t.num_threads, load_start))
    device = pick_device(t.device)
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    base_model, tokenizer = load_model(t.base_model, device, log)
    check_target_modules(base_model, list(t.lora_target_modules))
    pad_id = int(tokenizer.pad_token_id)
    timings["model_load"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    data = prepare(cfg, tokenizer)
    timings["data_prep"] = time.perf_counter() - t0
    domain_rows_per_epoch = len(data.domain_generations[0])
    share, how = cfg.effective_mixing_ratio(domain_rows_per_epoch)
    log(
        f"data: {len(data.rehearsal_pool)} rehearsal passages, {len(data.general_eval)} held-out general, "
        f"{data.manifest['domain_train_rows']} domain train, {len(data.domain_eval)} domain eval; "
        f"rehearsal share {share:.4f} ({how})"
    )
    partial = _partial_dir(out, cfg)

    arms: dict[str, dict[str, Any]] = {}
    if "base" in cfg.evaluation.arms or any(a != "base" for a in cfg.evaluation.arms):
        t0 = time.perf_counter()
        arms["base"] = _measure(base_model, tokenizer, data, pad_id, with_probe=True)
        timings["base_eval"] = time.perf_counter() - t0
        log(f"base: general {arms['base']['general_loss']:.4f}, domain {arms['base']['domain_loss']:.4f}, probe {arms['base']['probe_score']:.3f}")

    for arm in ("naive", "rehearsal"):
        if arm not in cfg.evaluation.arms:
            continue
        t0 = time.perf_counter()
        arm_share = share if arm == "rehearsal" else 0.0
        arms[arm] = _train_arm(arm, arm_share, base_model, tokenizer, data, cfg, pad_id, partial, log, max_steps)
        timings[f"{arm}_total"] = time.perf_counter() - t0
    if "base" not in cfg.evaluation.arms:
        arms.pop("base", None)

    metrics: dict[str, Any] = {
        "schema_version": METRICS_SCHEMA_VERSION,
        "arms": arms,
        "effect": effect(arms),
        "mixing": _mixing_summary(arms, share, how, cfg),
        "data": data.manifest,
        "config": cfg.to_dict(),
        "config_source": cfg.source,
        "environment": {**_environment(device), "loadavg_1min_start": load_start, "loadavg_1min_end": _loadavg()},
        "timings": {k: round(v, 2) for k, v in timings.items()},
    }
    metrics["wall_seconds"] = round(time.perf_counter() - wall0, 2)
    plot_losses(partial / PLOT_NAME, metrics)
    write_report(partial / "report.md", metrics)
    write_metrics(partial / "metrics.json", metrics)  # last: its presence marks a complete run
    for leftover in partial.glob("*/checkpoint.pt"):
        leftover.unlink()
    (partial / "config.sha256").unlink()
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    log(f"wrote {out / 'report.md'}, {out / 'metrics.json'}, {out / PLOT_NAME} in {metrics['wall_seconds']:.1f} s")
    return metrics


def _train_arm(
    arm: str, share: float, base_model: Any, tokenizer: Any, data: Prepared, cfg: Config,
    pad_id: int, partial: Path, log: Log, max_steps: int | None,
) -> dict[str, Any]:
    model = add_lora(copy.deepcopy(base_model), cfg.training)
    orch = cfg.orchestration
    generations: list[dict[str, Any]] = []
    scores: list[float] = []
    curve: list[dict[str, Any]] = []
    offset = 0
    for g in range(orch.num_generations):
        lineage = select_lineage(g, orch.training_window_size, orch.lineage, scores)
        domain = _concat([data.domain_generations[i] for i in lineage])

        def on_eval(step: int, _offset: int = offset, _g: int = g) -> dict[str, float]:
            result = _measure(model, tokenizer, data, pad_id, with_probe=False)
            curve.append({"step": _offset + step, **result})
            log(f"{arm} gen {_g} step {step}: general {result['general_loss']:.4f}, domain {result['domain_loss']:.4f}")
            return result

        train_log = train_lora(
            model, pad_id, domain, data.rehearsal_pool if share > 0 else None, cfg.training, share,
            checkpoint_dir=partial / f"{arm}-gen{g}", on_eval=on_eval,
            eval_points=cfg.evaluation.eval_points, desc=f"{arm} gen {g}", max_steps=max_steps,
        )
        if not train_log.evals or train_log.evals[-1]["step"] != len(train_log.steps):
            on_eval(len(train_log.steps))  # max_steps stopped before the last scheduled evaluation
            train_log.evals.append(dict(curve[-1], step=len(train_log.steps)))
        final = dict(train_log.evals[-1])
        offset += len(train_log.steps)
        scores.append(-final["domain_loss"])
        generations.append({"generation": g, "lineage": lineage, "domain_rows": len(domain), "train": train_log.to_dict(), **{k: final[k] for k in ("general_loss", "domain_loss")}})
        if cfg.output.save_adapters:
            _save_adapter(model, partial / "adapters" / arm / f"gen{g}", cfg, data, arm, share, lineage)
        log(f"{arm} gen {g}: {len(train_log.steps)} steps, {train_log.tokens} tokens in {train_log.seconds:.1f} s")
    probe = probe_score(model, tokenizer, data.probe, pad_id)
    last = generations[-1]
    total_tokens = sum(gen["train"]["tokens"] for gen in generations)
    total_seconds = sum(gen["train"]["seconds"] for gen in generations)
    return {
        "general_loss": last["general_loss"],
        "domain_loss": last["domain_loss"],
        "probe_score": probe["exact_match"],
        "probe_logprob": probe["answer_logprob"],
        "share": share,
        "curve": curve,
        "generations": generations,
        "train_total": {
            "tokens": total_tokens,
            "seconds": round(total_seconds, 2),
            "tokens_per_second": round(total_tokens / total_seconds, 1) if total_seconds else None,
        },
    }


def _save_adapter(model: Any, where: Path, cfg: Config, data: Prepared, arm: str, share: float, lineage: list[int]) -> None:
    model.save_pretrained(where)
    (where / "replaybank.json").write_text(
        json.dumps(
            {"arm": arm, "rehearsal_share": share, "lineage": lineage, "config": cfg.to_dict(), "data": data.manifest},
            indent=2, sort_keys=True,
        )
    )


def _mixing_summary(arms: dict[str, Any], share: float, how: str, cfg: Config) -> dict[str, Any]:
    out: dict[str, Any] = {"share": share, "how": how, "batch_size": cfg.training.batch_size, "semantics": "fixed quota of every micro-batch (largest remainder, credit carried)"}
    reh = arms.get("rehearsal")
    if reh:
        steps = [s for gen in reh["generations"] for s in gen["train"]["steps"]]
        rows = sum(s["rows"] for s in steps)
        rrows = sum(s["rehearsal_rows"] for s in steps)
        per_batch = sorted({s["rehearsal_rows"] for s in steps})
        out["rows_per_batch"] = per_batch
        out["measured_row_share"] = rrows / rows if rows else None
        tokens = sum(s["tokens"] for s in steps)
        out["rehearsal_tokens"] = sum(s.get("rehearsal_tokens", 0) for s in steps)
        out["measured_token_share"] = out["rehearsal_tokens"] / tokens if tokens else None
    return out


def _loadavg() -> float | None:
    # Other processes on a small machine change the timings a lot; the report says how busy it was.
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _environment(device: str) -> dict[str, Any]:
    import peft
    import torch
    import transformers

    return {
        "device": device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }
