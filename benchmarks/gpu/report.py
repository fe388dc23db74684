"""The device check's table (markdown) from its ``check.json`` dict: one section per stage, and a
line saying why for a stage that did not finish.

    >>> print(render({"device": "cpu", "tiny": True, "total_seconds": 1.0, "stages": {}}).splitlines()[0])
    # Device check: cpu (tiny shapes, a dry run: not GPU figures), 1.0 s
"""

from __future__ import annotations

from typing import Any

TITLES = {
    "env": "Environment",
    "tests": "CUDA/bf16 tests",
    "per": "Prioritized step: the torch priority tree vs the default tree (sample + update_priorities)",
    "speed": "LoRA step speed: replaybank vs transformers.Trainer (bf16, same rows, same LoRA)",
    "memory": "Peak memory: 7B shape, LoRA r32 on every linear layer",
    "mainjob": "Main job: replaybank run (embedded default, random SmolLM2-135M-shaped model)",
}


def _f(x: Any, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def _env(r: dict[str, Any]) -> list[str]:
    keys = ["gpu", "capability", "gpu_memory_gib", "bf16_supported", "bf16_matmul_tflops", "bf16_matmul_n", "python",
            "torch", "torch_cuda", "transformers", "peft", "accelerate", "tokenizers", "safetensors", "huggingface-hub",
            "transformers_from", "cpus"]  # fmt: skip
    rows = ["| what | value |", "|---|---|"]
    for k in keys:
        if k in r:
            v = r[k]
            rows.append(f"| {k} | {format(v, '.1f') if isinstance(v, float) else v} |")
    return rows


def _tests(r: dict[str, Any]) -> list[str]:
    counts = ", ".join(f"{n} {k}" for k, n in r.get("counts", {}).items()) or "no summary"
    lines = [f"`pytest {' '.join(r.get('files', []))}`: **{counts}** (exit code {r.get('returncode')}, "
             f"{_f(r.get('seconds'), '.1f')} s)"]  # fmt: skip
    notes = r.get("notes", [])
    return lines + ([""] + [f"    {ln}" for ln in notes] if notes else [])


def _per(r: dict[str, Any]) -> list[str]:
    runs = r.get("runs", [])
    if not runs:
        return ["no runs"]
    names = list(runs[0]["trees"])
    rows = [f"us per step (median of {r.get('rounds')} rounds; wall for a CUDA tree, thread CPU otherwise) and "
            f"the ratio to the default tree ({r.get('default_tree')}; above 1: slower); load average "
            f"{r.get('load_average')}", "",
            "| items | batch | " + " | ".join(names) + " |", "|---:|---:|" + "---:|" * len(names)]  # fmt: skip
    for run in runs:
        cells = [f"{run['trees'][n]['us']:.1f} ({run['trees'][n]['vs_default']:.2f}x)" for n in names]
        rows.append(f"| {run['items']:,} | {run['batch']} | " + " | ".join(cells) + " |")
    return rows


def _speed(r: dict[str, Any]) -> list[str]:
    rows = [f"{r.get('warmup')} untimed + {r.get('steps')} timed steps per runner (median), "
            f"{int(100 * r.get('rehearsal_share', 0))}% rehearsal rows; rows of a quarter prompt, three quarters "
            "labelled completion; Trainer: full-vocabulary logits at every position, its default optimizer", "",
            "| shape | rows x tokens | replaybank s/step | replaybank tokens/s | Trainer s/step | Trainer tokens/s | replaybank / Trainer |",
            "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for s in r.get("shapes", []):
        rb, tr = s.get("replaybank", {}), s.get("Trainer", {})
        cells = [f"{_f(x.get('s_per_step'), '.3f')} | {_f(x.get('tokens_per_s'), '.0f')}" if "error" not in x
                 else f"{x['error'][:60]} | -" for x in (rb, tr)]  # fmt: skip
        rows.append(f"| {s['shape']} | {s['rows']} x {s['seq']} | {cells[0]} | {cells[1]} | {_f(s.get('ratio'))}{'x' if s.get('ratio') else ''} |")
    return rows


def _memory(r: dict[str, Any]) -> list[str]:
    rows = [f"{r.get('shape')} ({r.get('parameters', 0) / 1e9:.2f} B parameters, weights {_f(r.get('weights_gib'), '.1f')} "
            f"GiB), {r.get('steps')} optimizer steps per run; peak = torch.cuda.max_memory_allocated", "",
            "| rows x tokens | checkpointing | peak allocated GiB | peak reserved GiB | s/step | tokens/s |",
            "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for run in r.get("runs", []):
        head = f"| {run['rows']} x {run['seq']} | {'yes' if run['checkpointing'] else 'no'} |"
        if "error" in run:
            rows.append(f"{head} {run['error'][:70]} | - | - | - |")
            continue
        sps = run.get("s_per_step")
        tps = run["rows"] * run["seq"] / sps if sps else None
        rows.append(f"{head} {_f(run.get('peak_gib'), '.1f')} | {_f(run.get('reserved_gib'), '.1f')} | "
                    f"{_f(sps, '.3f')} | {_f(tps, '.0f')} |")  # fmt: skip
    return rows


def _mainjob(r: dict[str, Any]) -> list[str]:
    if "skipped" in r:
        return [f"skipped: {r['skipped']}"]
    timings = sorted(r.get("timings", {}).items(), key=lambda kv: -kv[1])
    lines = [f"**{_f(r.get('wall_seconds'), '.1f')} s wall** ({r.get('budget')}; device {r.get('device')}; "
             f"peak {_f(r.get('peak_gib'), '.1f')} GiB); arms {', '.join(r.get('arms', []))}; optimizer steps "
             f"{r.get('steps')}", "", "| phase | seconds |", "|---|---:|"]  # fmt: skip
    return lines + [f"| {k} | {v:.1f} |" for k, v in timings]


SECTIONS = {"env": _env, "tests": _tests, "per": _per, "speed": _speed, "memory": _memory, "mainjob": _mainjob}


def render(report: dict[str, Any]) -> str:
    """The whole table: a header, the stages' status, then one section per stage."""
    env = report["stages"].get("env", {}).get("result", {})
    where = env.get("gpu") or report["device"]
    kind = " (tiny shapes, a dry run: not GPU figures)" if report.get("tiny") else ""
    lines = [f"# Device check: {where}{kind}, {report.get('total_seconds')} s", ""]
    if report["stages"]:
        lines += ["| stage | status | seconds | limit |", "|---|---|---:|---:|"]
        lines += [f"| {n} | {e['status']} | {e['seconds']} | {e.get('limit_s', '-')} |" for n, e in report["stages"].items()]
    for name, entry in report["stages"].items():
        lines += ["", f"## {TITLES[name]}", ""]
        lines += SECTIONS[name](entry["result"]) if "result" in entry else [f"no figures: {entry['status']}"]
    return "\n".join(lines) + "\n"
