"""``replaybank traces simulate | inspect | synth | record | compare``: MoE routing traces and
expert-cache replay."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from replaybank.argtypes import integer_at_least, positive_real

SIMULATE_HELP = """\
Replay a routing trace (a folder written by save_trace or 'traces synth') against one expert
cache per traced layer, for each policy, and print misses, loads, bytes moved, stalls, the
victim-selection rate and the share of the LRU-to-optimal gap each policy recovers.

Semantics. --semantics step (the default, and the correct one) makes each step one atomic event:
a prefill or a decode step needs the union of the experts its tokens route to, all resident at
once; a step whose union exceeds the capacity is an error naming layer, request and step (it is
never split; --steps decode replays only the decode steps, as if prefill ran elsewhere). --semantics token replays token by token, the biased semantics of many trace-based
evaluations (reuse inside a step counts as hits; a too-large step is split silently); 'both' runs
the two as a matched pair.

Policies. lru, lfu (uses since the trace began, ties by recency), lfru (use counts halving every
--half-life events), random (seeded by --seed), pred (causal next-use predictor: evicts the expert
least likely to be needed next, from a Markov chain over experts learned online from the events
already replayed, never the future), opt (offline optimum with compulsory admission: Belady's MIN
over per-step unions, a lower bound for every policy). Victim rate: the share of a
policy's evictions whose victim opt would also have picked from that cache. Gap recovered:
(misses_lru - misses_policy) / (misses_lru - misses_opt).

Every miss is loaded (compulsory admission): loads = misses + prefetch loads, bytes = loads x
--expert-bytes; a stall is an event that waited for at least one load. --prefetch N loads, before
each event of layer l+1, the N experts that most often ran with layer l's current experts in the
events before (0 = off); a prefetch is useful when the event then needs it.
"""


def add_subcommands(subparsers: Any) -> None:
    """Add ``traces`` (``simulate``, ``inspect``, ``synth``) to the top-level parser."""
    traces = subparsers.add_parser(
        "traces",
        help="MoE routing traces: replay expert-caching policies (simulate, inspect, synth, record, "
        "compare)",
    )
    sub = traces.add_subparsers(dest="traces_command", metavar="ACTION", required=True)
    sim = sub.add_parser(
        "simulate",
        help="replay a trace against per-layer expert caches, for each policy",
        description=SIMULATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument("trace", help="trace folder (manifest.json + .npy columns)")
    size = sim.add_mutually_exclusive_group(required=True)
    size.add_argument(
        "--capacity", type=integer_at_least(1), help="experts cached per layer (same for every layer)"
    )
    size.add_argument(
        "--ratio", type=float, help="capacity as a share of each layer's experts, in (0, 1]"
    )
    sim.add_argument(
        "--policies",
        default="lru,lfu,lfru,random,pred,opt",
        help="comma-separated, from lru, lfu, lfru, random, pred, opt (default: all)",
    )
    sim.add_argument("--semantics", choices=("step", "token", "both"), default="step")
    sim.add_argument(
        "--steps",
        choices=("all", "decode", "prefill"),
        default="all",
        help="replay every step (default) or only decode / prefill steps",
    )
    sim.add_argument(
        "--expert-bytes",
        type=integer_at_least(0),
        default=0,
        help="bytes of one expert's weights (for bytes moved)",
    )
    sim.add_argument("--seed", type=integer_at_least(0), default=0, help="seed of the random policy")
    sim.add_argument("--half-life", type=positive_real, default=32.0, help="lfru's half-life, in events")
    sim.add_argument(
        "--prefetch", type=integer_at_least(0), default=0, help="experts prefetched per event for layers >= 1"
    )
    sim.add_argument("--per-layer", action="store_true", help="also print each layer's miss rates")
    sim.add_argument(
        "--json",
        type=Path,
        help="also write the results, union statistics and capacity ratios here (a regular file)",
    )
    sim.set_defaults(func=cmd_simulate)

    inspect = sub.add_parser(
        "inspect", help="a trace's shape and its per-step union sizes per layer"
    )
    inspect.add_argument("trace", help="trace folder")
    inspect.set_defaults(func=cmd_inspect)

    synth = sub.add_parser(
        "synth", help="write a synthetic trace (Zipf popularity, Markov locality) for trying things"
    )
    synth.add_argument("out", type=Path, help="folder to create")
    _int_options(synth, (
        ("requests", 64, "requests", 1),
        ("prompt-tokens", 16, "tokens per prefill", 1),
        ("decode-tokens", 64, "decode steps per request", 0),
        ("layers", 4, "traced layers", 1),
        ("experts", 32, "experts per layer", 1),
        ("top-k", 2, "experts per token", 1),
        ("concurrent", 4, "requests interleaved at a time", 1),
        ("seed", 0, "seed", 0),
    ))
    synth.add_argument(
        "--zipf", type=float, default=1.0, help="Zipf exponent of popularity (0 = uniform)"
    )
    synth.add_argument(
        "--stickiness",
        type=float,
        default=0.3,
        help="chance a token reuses the previous token's experts",
    )
    synth.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT if it is a trace folder (one that holds only a trace's files); any other "
        "folder is refused, never deleted",
    )
    synth.set_defaults(func=cmd_synth)
    _add_record(sub)
    _add_compare(sub)


def _int_options(parser: Any, options: tuple[tuple[str, int, str, int], ...]) -> None:
    """``--NAME`` integer options from ``(name, default, help, lowest allowed)`` rows."""
    for name, default, helptext, low in options:
        parser.add_argument(
            f"--{name}", type=integer_at_least(low), default=default, help=f"{helptext} (default {default})"
        )


def _add_record(sub: Any) -> None:
    rec = sub.add_parser(
        "record",
        help="record a trace of the tiny MoE model trained here (trained first if not cached)",
        description="Serve windows of a workload (prose: held-out documentation; code: stdlib "
        "source) to the byte-level MoE model of traces/moe.py and save its routing trace. The "
        "model is loaded from --cache, or trained there first (about 7 minutes on one thread).",
    )
    rec.add_argument("out", type=Path, help="trace folder to create")
    rec.add_argument("--workload", choices=("prose", "code"), required=True)
    _int_options(rec, (
        ("requests", 64, "requests (windows of text)", 1),
        ("prompt-tokens", 32, "prompt bytes per request", 1),
        ("decode-tokens", 64, "decode steps per request (fed the text's next bytes)", 0),
        ("prefill-chunk", 4, "prompt bytes per prefill step (chunked prefill)", 1),
        ("seed", 0, "which windows are drawn", 0),
    ))
    rec.add_argument("--cache", type=Path, help="model cache (default ~/.cache/replaybank/moe)")
    rec.add_argument(
        "--train-seconds",
        type=positive_real,
        default=420.0,
        help="training budget of the model (part of its cache key; default 420)",
    )
    rec.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT if it is a trace folder; any other folder is refused, never deleted",
    )
    rec.set_defaults(func=cmd_record)


def _add_compare(sub: Any) -> None:
    cmp = sub.add_parser(
        "compare",
        help="matched-pair interventions over workloads and seeds: report.md, plots, metrics.json",
        description="Replay seeded units of each trace (--requests requests, --concurrent in "
        "flight) under a baseline (per-step semantics, workloads separate, no prefetch, "
        "--ratio) and with one factor changed at a time (per-token semantics, workloads mixed, "
        "--prefetch, --alt-ratio); report each factor's effect on the ranking of the causal "
        "policies (Kendall tau, rank changes, gap-recovered shifts) with spreads over workloads "
        "and seeds, plus miss rate vs capacity ratio per policy per layer.",
    )
    cmp.add_argument("traces", nargs="+", type=Path, help="trace folders, one per workload")
    cmp.add_argument("--out", type=Path, required=True, help="report folder")
    cmp.add_argument(
        "--seeds", default="0,1,2,3,4", help="comma-separated integer seeds >= 0 (default 0..4)"
    )
    cmp.add_argument("--requests", type=integer_at_least(1), default=24, help="requests per unit (default 24)")
    cmp.add_argument("--concurrent", type=integer_at_least(1), default=4, help="requests in flight (default 4)")
    cmp.add_argument("--ratio", type=float, default=0.5, help="baseline capacity ratio")
    cmp.add_argument("--alt-ratio", type=float, default=0.625, help="the capacity intervention")
    cmp.add_argument("--prefetch", type=integer_at_least(0), default=2, help="the prefetch intervention")
    cmp.add_argument("--sweep", default="0.5,0.5625,0.625,0.6875,0.75,0.8125,0.875,0.9375",
                     help="capacity ratios of the miss-rate plot")  # fmt: skip
    cmp.set_defaults(func=cmd_compare)


def _fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1f}"


def _print_unions(stats: list[dict[str, float]], caps: tuple[int, ...] | None = None) -> None:
    print(
        f"{'layer':>6}{'experts':>9}{'capacity':>11}{'union max':>11}{'mean':>7}{'p95':>7}{'prefill':>9}{'decode':>8}"
    )
    for i, s in enumerate(stats):
        cap = "-" if caps is None else f"{caps[i]} ({caps[i] / s['num_experts']:.2f})"
        print(
            f"{s['layer']:>6}{s['num_experts']:>9}{cap:>11}{s['max']:>11.0f}{s['mean']:>7.1f}"
            f"{s['p95']:>7.1f}{_fmt(s['prefill_mean']):>9}{_fmt(s['decode_mean']):>8}"
        )


def cmd_simulate(args: argparse.Namespace) -> int:
    from ..errors import ReplayBankError
    from ..files import check_writable, write_regular
    from .events import union_stats
    from .simulate import POLICIES, capacities, capacity_for_ratio, compare
    from .store import load_trace

    if args.json is not None:  # before the replay, so a FIFO or a folder fails at once
        check_writable(args.json, what="--json file")
    trace = load_trace(args.trace, mmap=True)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ReplayBankError(
            f"--policies: {unknown or 'none'} unknown; choose from {list(POLICIES)}"
        )
    caps = (
        capacity_for_ratio(trace, args.ratio)
        if args.ratio is not None
        else capacities(trace, args.capacity)
    )
    stats = union_stats(trace)
    print(
        f"{args.trace}: {trace.num_steps:,} steps, {trace.num_tokens:,} tokens x {trace.num_layers} "
        f"layers = {trace.routing_events:,} routing events, top-{trace.top_k}\n"
    )
    print("per-step union of experts (the paper's reporting) and capacity (ratio) per layer:")
    _print_unions(stats, caps)
    out: dict[str, Any] = {
        "trace": str(args.trace),
        "unions": stats,
        "capacities": list(caps),
        "capacity_ratio": [c / e for c, e in zip(caps, trace.num_experts)],
    }
    for semantics in ("step", "token") if args.semantics == "both" else (args.semantics,):
        res = compare(
            trace,
            caps,
            policies,
            semantics=semantics,
            steps=args.steps,
            expert_bytes=args.expert_bytes,  # type: ignore[arg-type]
            seed=args.seed,
            half_life=args.half_life,
            prefetch=args.prefetch,
        )
        print(
            f"\nsemantics = {semantics}"
            + (" (atomic per-step unions)" if semantics == "step" else " (biased)")
            + ("" if args.steps == "all" else f", {args.steps} steps only")
        )
        print(res.table())
        if args.per_layer:
            print(
                "miss rate per layer: "
                + "; ".join(
                    f"{name} " + " ".join(f"{c.miss_rate:.3f}" for c in r.layers)
                    for name, r in res.results.items()
                )
            )
        out[semantics] = res.to_dict()
    if args.json:
        write_regular(args.json, json.dumps(out, indent=1), what="--json file")
        print(f"\nwrote {args.json}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from .events import union_stats
    from .store import load_trace

    trace = load_trace(args.trace, mmap=True)
    requests = len(set(trace.request.tolist()))
    print(
        f"{args.trace}: {requests:,} requests, {trace.num_steps:,} steps "
        f"({int((trace.kind == 0).sum()):,} prefill, {int((trace.kind == 1).sum()):,} decode), "
        f"{trace.num_tokens:,} tokens, {trace.num_layers} layers (model layers "
        f"{list(trace.layers)}), top-{trace.top_k}; checksums and rows verified"
    )
    for key, value in trace.meta.items():
        print(f"  {key}: {value}")
    _print_unions(union_stats(trace))
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from .store import save_trace
    from .synthetic import synthetic_trace

    trace = synthetic_trace(
        requests=args.requests,
        prompt_tokens=args.prompt_tokens,
        decode_tokens=args.decode_tokens,
        layers=args.layers,
        experts=args.experts,
        top_k=args.top_k,
        zipf=args.zipf,
        stickiness=args.stickiness,
        concurrent=args.concurrent,
        seed=args.seed,
    )
    save_trace(trace, args.out, overwrite=args.overwrite)
    print(f"wrote {args.out}: {trace.routing_events:,} routing events")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from .moe import DEFAULT_CACHE, MoeSpec, load_or_train
    from .store import save_trace
    from .workloads import record_workload

    spec = MoeSpec(seconds=args.train_seconds)
    model, training = load_or_train(spec, args.cache or DEFAULT_CACHE)
    trace = record_workload(
        model, args.workload, requests=args.requests, prompt_tokens=args.prompt_tokens,
        decode_tokens=args.decode_tokens, prefill_chunk=args.prefill_chunk, seed=args.seed,
        meta={"model": f"mixtral-{spec.digest()}"},
    )  # fmt: skip
    save_trace(trace, args.out, overwrite=args.overwrite)
    print(
        f"wrote {args.out}: {trace.num_steps:,} steps, {trace.routing_events:,} routing events "
        f"(model: {training['steps']} training steps, held-out loss "
        f"{training['heldout_loss_bytes']:.3f} nats/byte)"
    )
    return 0


def _seeds(text: str) -> tuple[int, ...]:
    from ..errors import ReplayBankError

    seeds = []
    for part in (p.strip() for p in text.split(",")):
        if part and not (part.isascii() and part.isdigit()):
            raise ReplayBankError(
                f"--seeds = {text!r}: {part!r} is not an integer >= 0; expected comma-separated "
                "seeds such as 0,1,2"
            )
        if part:
            seeds.append(int(part))
    if not seeds:
        raise ReplayBankError(f"--seeds = {text!r}: expected at least one seed")
    return tuple(seeds)


def _floats(text: str, what: str) -> list[float]:
    from ..errors import ReplayBankError

    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = [math.nan]
    if not values or not all(math.isfinite(v) for v in values):
        raise ReplayBankError(f"{what} = {text!r}: expected comma-separated finite numbers")
    return values


def cmd_compare(args: argparse.Namespace) -> int:
    from ..errors import ReplayBankError
    from .interventions import Design, run_study
    from .report import check_report_folder, sweep, write_report
    from .schedule import interleave
    from .store import load_trace

    workloads = {}
    for folder in args.traces:
        trace = load_trace(folder)
        name = trace.meta.get("workload") or folder.name
        if name in workloads:
            raise ReplayBankError(f"{folder}: a second trace of workload {name!r}")
        workloads[name] = trace
    seeds = _seeds(args.seeds)
    ratios = _floats(args.sweep, "--sweep")
    check_report_folder(args.out)  # before the study, so a folder that is not ours fails at once
    design = Design(
        seeds, args.requests, args.concurrent, args.ratio, args.alt_ratio, args.prefetch
    )
    study = run_study(workloads, design)
    sweeps = [sweep(interleave(t, args.concurrent, 0), ratios) for t in workloads.values()]
    path = write_report(args.out, study, sweeps, workloads)
    print(path.read_text())
    print(f"wrote {path}, metrics.json and plots in {args.out}")
    return 0
