"""``replaybank adapters {add,list,show,remove,merge,aggregate,route}``: the adapter library from the shell.

Thin: parse, call :mod:`replaybank.llm.adapters`, print. Torch is imported only by the commands
that load a model (``add --base``/``--measure``, ``merge``, ``aggregate``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from replaybank.llm.adapters.errors import EmptyLibraryError, LibraryError

EPILOG = """\
examples:
  replaybank adapters add lib tools --from runs/loop/run/adapters/gen5 --skill "tool calls" --examples prompts.txt
  replaybank adapters add lib tools --from DIR --skill S --base smollm2 --measure --floor 0.9
  replaybank adapters list lib
  replaybank adapters merge lib both --adapters tools,agenda --type cat --weights 1,1 --base smollm2
  replaybank adapters aggregate lib "tool calls" --into tools-avg --base smollm2 --type cat
  replaybank adapters route lib "Add 3 eggs to my cart" "Write a poem"
"""


def add_subcommands(subparsers: Any) -> None:
    """Add ``adapters`` (with its own subcommands) to the ``replaybank`` parser."""
    top = subparsers.add_parser(
        "adapters", help="an adapter library: register (gated), list, show, remove, merge and route LoRA adapters",
        description="A folder of LoRA adapters, each a PEFT folder with a checked manifest (docs/adapters.md).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="adapters_command", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="register a PEFT adapter folder (atomic; gated with --floor)")
    add.add_argument("library", help="the library folder (created when absent)")
    add.add_argument("name", help="the adapter's name in the library")
    add.add_argument("--from", dest="folder", required=True, help="a PEFT adapter folder (e.g. a loop's adapters/genN)")
    add.add_argument("--skill", required=True, help="what the adapter is for")
    add.add_argument("--domain", help="its domain")
    add.add_argument("--examples", help="a text file of example prompts, one a line (what the router matches)")
    add.add_argument("--base", help="the base model (name or folder): fingerprinted, and measured with --measure; "
                     "default: the fingerprint in the folder's replaybank.json")
    add.add_argument("--measure", action="store_true", help="measure retention on the general suite (needs --base)")
    add.add_argument("--suite-per-family", type=int, default=0, help="suite items per family for --measure (0 = all)")
    add.add_argument("--figures", help="a JSON file of figures measured elsewhere: {retention, domain, per_family, n}")
    add.add_argument("--floor", type=float, help="refuse below this retention (a fraction, e.g. 0.9)")
    add.add_argument("--force", action="store_true", help="register below the floor anyway (recorded)")
    add.set_defaults(func=cmd_add)
    ls = sub.add_parser("list", help="the registered adapters")
    ls.add_argument("library", help="the adapter library folder")
    ls.add_argument("--json", action="store_true", help="print the library index as JSON instead of a table")
    ls.set_defaults(func=cmd_list)
    show = sub.add_parser("show", help="one adapter's manifest (checked; --verify also hashes the weights)")
    show.add_argument("library", help="the adapter library folder")
    show.add_argument("name")
    show.add_argument("--verify", action="store_true")
    show.set_defaults(func=cmd_show)
    rm = sub.add_parser("remove", help="unregister an adapter and delete its folder")
    rm.add_argument("library", help="the adapter library folder")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_remove)
    mg = sub.add_parser("merge", help="merge adapters into a new one (PEFT add_weighted_adapter)")
    mg.add_argument("library", help="the adapter library folder")
    mg.add_argument("into", help="the merged adapter's name")
    mg.add_argument("--adapters", required=True, help="comma-separated names")
    mg.add_argument("--weights", help="comma-separated weights (default 1/n each)")
    mg.add_argument("--type", default="linear", help="linear, cat, svd, ties, dare_ties, dare_linear, magnitude_prune, ...")
    mg.add_argument("--density", type=float, help="for ties / dare_* / magnitude_prune")
    mg.add_argument("--svd-rank", type=int, help="rank of an svd merge (default the largest)")
    mg.add_argument("--base", required=True, help="the base model the adapters were trained on")
    mg.add_argument("--skill", help="the merged adapter's skill (default: the parents' joined by +)")
    mg.set_defaults(func=cmd_merge)
    ag = sub.add_parser(
        "aggregate", help="merge the learners of one skill (its adapters from different seeds or data shards) into one",
        description="Merge every adapter registered with skill SKILL (merges excluded; or exactly --adapters) with "
                    "equal weights: 1/n for the types that sum (linear, cat, svd, dare_linear, magnitude_prune), 1 for "
                    "the disjoint means (ties, dare_ties). cat and svd give exactly the mean of the learners' deltas; "
                    "linear adds the cross terms B_i A_j / n. The result is registered under INTO with skill SKILL, "
                    "the learners' example prompts, and their names and data manifests. Refused: fewer than 2 "
                    "learners, an unknown skill, learners of different base models or (for linear, ties) ranks.",
    )
    ag.add_argument("library", help="the adapter library folder")
    ag.add_argument("skill", help="the skill the learners were registered with (adapters add --skill)")
    ag.add_argument("--into", required=True, help="the aggregate's name")
    ag.add_argument("--base", required=True, help="the base model the learners were trained on")
    ag.add_argument("--type", default="linear", help="combination type: linear (default), cat, svd, ties, dare_ties, ...")
    ag.add_argument("--density", type=float, help="kept share for ties / dare_* / magnitude_prune, e.g. 0.5")
    ag.add_argument("--adapters", help="comma-separated learners (default: every adapter of the skill, merges excluded)")
    ag.add_argument("--seed", type=int, default=0, help="seed of the DARE types' random drops (default 0)")
    ag.set_defaults(func=cmd_aggregate)
    rt = sub.add_parser("route", help="which adapter each prompt goes to (BM25 over example prompts; else the base)")
    rt.add_argument("library", help="the adapter library folder")
    rt.add_argument("prompts", nargs="+")
    rt.add_argument("--threshold", type=float, default=0.3, help="minimum confidence, else the base model (default 0.3)")
    rt.add_argument("--top-k", type=int, default=1, help="score an adapter by the mean of its K best examples (default 1)")
    rt.add_argument("--background", help="general prompts that belong to the base model: 'builtin' (the shipped "
                                         "self-synthesis pool) or a file, one prompt per line")
    rt.add_argument("--calibrate", action="store_true", help="choose --top-k and --threshold by routing the examples "
                                                             "and the background left-one-out (needs --background)")
    rt.add_argument("--json", action="store_true", help="print the routing decisions as JSON")
    rt.set_defaults(func=cmd_route)


def cmd_add(args: argparse.Namespace) -> int:
    from replaybank.llm.adapters import AdapterLibrary, Registration, suite_measure

    examples = _examples(Path(args.examples)) if args.examples else []
    figures = _figures(Path(args.figures)) if args.figures else None
    base = tok = None
    if args.measure and not args.base:
        raise LibraryError("--measure needs --base (the model to measure on)", adapter=args.name, field="base")
    if args.base:
        from replaybank.llm.model import load_model

        base, tok = load_model(args.base, "cpu", log=lambda m: None)
    registration = Registration(args.name, skill=args.skill, domain=args.domain, examples=examples, figures=figures,
                                base_name=args.base)
    manifest = AdapterLibrary(args.library, create=True).add(
        Path(args.folder), registration, base_model=base, floor=args.floor, force=args.force,
        measure=suite_measure(tok, per_family=args.suite_per_family) if args.measure else None,
    )
    fig = manifest.figures or {}
    extra = f", retention {fig['retention']:.1%}" if fig.get("retention") is not None else ""
    print(f"registered {manifest.name} ({manifest.sha256[:16]}, skill {manifest.skill!r}{extra}"
          f"{', FORCED below the floor' if fig.get('forced') else ''})")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from replaybank.llm.adapters import AdapterLibrary

    index = AdapterLibrary(args.library).index()
    if args.json:
        print(json.dumps(index, indent=1, sort_keys=True))
        return 0
    if not index:
        print(f"{args.library}: no adapters")
    for name, row in sorted(index.items()):
        ret = row.get("retention")
        print(f"{name:<24} {row.get('skill', '')!s:<24} {str(row.get('sha256', ''))[:16]}  "
              f"retention {'-' if ret is None else f'{ret:.1%}'}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from replaybank.llm.adapters import AdapterLibrary

    lib = AdapterLibrary(args.library)
    m = lib.verify(args.name) if args.verify else lib.manifest(args.name)
    print(json.dumps(m.to_dict(), indent=1, sort_keys=True))
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from replaybank.llm.adapters import AdapterLibrary

    AdapterLibrary(args.library).remove(args.name)
    print(f"removed {args.name}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from replaybank.llm.adapters import AdapterLibrary, merge
    from replaybank.llm.model import load_model

    names = [n.strip() for n in args.adapters.split(",") if n.strip()]
    try:
        weights = [float(w) for w in args.weights.split(",")] if args.weights else None
    except ValueError:
        raise LibraryError(f"--weights {args.weights!r} is not comma-separated numbers", field="weights") from None
    base, _ = load_model(args.base, "cpu", log=lambda m: None)
    m = merge(AdapterLibrary(args.library), names, into=args.into, base_model=base, weights=weights,
              combination_type=args.type, density=args.density, svd_rank=args.svd_rank, skill=args.skill)
    print(f"registered {m.name} ({m.sha256[:16]}): {args.type} of {', '.join(names)}")
    return 0


def cmd_aggregate(args: argparse.Namespace) -> int:
    from replaybank.llm.adapters import AdapterLibrary, aggregate
    from replaybank.llm.model import load_model

    names = [n.strip() for n in args.adapters.split(",") if n.strip()] if args.adapters else None
    library = AdapterLibrary(args.library)
    base, _ = load_model(args.base, "cpu", log=lambda m: None)
    m = aggregate(library, args.skill, into=args.into, base_model=base, combination_type=args.type,
                  density=args.density, names=names, seed=args.seed)
    weights = ", ".join(f"{w:.3g}" for w in (m.merge or {}).get("weights", []))
    print(f"registered {m.name} ({m.sha256[:16]}, skill {m.skill!r}): {args.type} of {', '.join(m.parents)} "
          f"(weights {weights})")
    return 0


def cmd_route(args: argparse.Namespace) -> int:
    from replaybank.llm.adapters import AdapterLibrary, Router
    from replaybank.llm.data.selfsynth import load_prompt_pool

    library = AdapterLibrary(args.library)
    general = [] if not args.background else load_prompt_pool(args.background)[0]
    if args.calibrate and not general:
        raise LibraryError("--calibrate needs --background (builtin or a file of general prompts)", field="background")
    if args.calibrate:
        names = library.names()
        if not names:
            raise EmptyLibraryError(f"{library.root}: the library holds no adapter to route to", field="adapters")
        router = Router.calibrated({n: library.manifest(n).examples for n in names}, general)
        print(f"calibrated: top-k {router.top_k}, threshold {router.threshold}")
    else:
        router = Router.from_library(library, threshold=args.threshold, top_k=args.top_k, background=general)
    routes = router.route_many(args.prompts)
    if args.json:
        print(json.dumps([{"prompt": p, "adapter": r.adapter, "confidence": round(r.confidence, 4), "best": r.best}
                          for p, r in zip(args.prompts, routes, strict=True)], indent=1))
        return 0
    for prompt, r in zip(args.prompts, routes, strict=True):
        print(f"{r.adapter or '(base model)':<24} confidence {r.confidence:.2f}  {prompt}")
    return 0


#: the largest ``--examples`` file read (prompts, one a line)
MAX_EXAMPLES_BYTES = 16 << 20


def _examples(path: Path) -> list[str]:
    """The prompts of a regular text file, one a line (a FIFO or a device is refused, never read;
    at most :data:`MAX_EXAMPLES_BYTES`)."""
    from replaybank.files import read_regular

    raw = read_regular(path, error=LibraryError, what="example prompts file", max_bytes=MAX_EXAMPLES_BYTES)
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise LibraryError(f"{path}: example prompts are not UTF-8 (byte {exc.start})", field="examples") from None
    return [line.strip() for line in lines if line.strip()]


def _figures(path: Path) -> dict[str, Any]:
    from replaybank.llm.adapters.errors import ManifestError
    from replaybank.llm.train.peft_files import read_json_object

    return read_json_object(path, "the figures file", error=ManifestError)
