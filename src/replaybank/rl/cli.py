"""The ``replaybank rl`` command: ``dqn``, ``compare``, ``offline``, ``grpo``, ``grpo-toy``.

Thin: options come from each experiment's ``Args`` dataclass (field help becomes ``--help``), and
torch / gymnasium are imported only inside the handlers, so ``replaybank --help`` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

__all__ = ["add_subcommands", "add_dataclass_options", "args_from_namespace"]


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_dataclass_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """One ``--field-name`` option per field of the ``Args`` dataclass ``cls``."""
    for f in dataclasses.fields(cls):
        default = f.default
        kind: Any = _bool if isinstance(default, bool) else type(default)
        if default is None:
            kind = str
        parser.add_argument(
            f"--{f.name.replace('_', '-')}", dest=f.name, type=kind, default=default,
            help=f"{f.metadata.get('help', '')} (default: {default})",
        )


def args_from_namespace(cls: type, ns: argparse.Namespace) -> Any:
    return cls(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)})


def add_subcommands(subparsers: Any) -> None:  # what ArgumentParser.add_subparsers returned
    """Add ``rl`` with its subcommands to the top-level ``replaybank`` parser."""
    from replaybank.rl import compare, dqn, grpo_demo, grpo_trainer, offline

    rl = subparsers.add_parser("rl", help="replay in RL: DQN, scheme comparison, offline, GRPO")
    sub = rl.add_subparsers(dest="rl_command", metavar="SUBCOMMAND", required=True)

    p = sub.add_parser("dqn", help="train double DQN with n-step returns on a gymnasium env",
                       description=dqn.__doc__.splitlines()[0] if dqn.__doc__ else None)
    add_dataclass_options(p, dqn.Args)
    p.add_argument("--actors", type=int, default=0,
                   help="0: one process; N: N Ray actors collect into a sharded buffer, one learner "
                        "samples with PER (replaybank.rl.dqn_dist, needs the dist extra) (default: 0)")
    p.add_argument("--shards", type=int, default=2, help="buffer shards with --actors (default: 2)")
    p.add_argument("--samples-per-insert", type=float, default=32.0,
                   help="rate limit with --actors: sampled per collected transition (default: 32)")
    p.set_defaults(func=run_dqn)

    p = sub.add_parser("compare", help="replay schemes x seeds on CartPole and MinAtar, curves with CIs")
    add_dataclass_options(p, compare.CompareArgs)
    p.set_defaults(func=run_compare)

    p = sub.add_parser("offline", help="trajectory replay on a chain MDP: reverse vs forward vs uniform")
    add_dataclass_options(p, offline.OfflineArgs)
    p.set_defaults(func=run_offline)

    p = sub.add_parser("grpo", help="GRPO with LoRA on SmolLM2-135M-Instruct: fresh rollouts vs rollout replay",
                       description=grpo_trainer.__doc__.splitlines()[0] if grpo_trainer.__doc__ else None)
    add_dataclass_options(p, grpo_trainer.GrpoLmArgs)
    p.set_defaults(func=run_grpo)

    p = sub.add_parser("grpo-toy", help="the seconds-fast GRPO toy (tiny MLP policy on a + b), same two arms")
    add_dataclass_options(p, grpo_demo.GrpoArgs)
    p.set_defaults(func=run_grpo_toy)


def run_dqn(ns: argparse.Namespace) -> int:
    from replaybank.rl import dqn

    args = args_from_namespace(dqn.Args, ns)
    if ns.actors:
        from replaybank.rl import dqn_dist

        m = dqn_dist.run(args, ns.actors, ns.shards, ns.samples_per_insert)
        print(f"wrote {args.out}/metrics.json, curve.csv, curve.png: final_eval_return "
              f"{m['final_eval_return']:.1f} after {m['env_steps']:,} env steps by {ns.actors} actors, "
              f"{m['gradient_steps']:,} gradient steps; sampled/inserted {m['samples_per_insert_measured']:.2f} "
              f"(target {ns.samples_per_insert:g})")
        return 0
    m = dqn.train(args)
    print(f"wrote {args.out}/metrics.json, curve.csv, curve.png: final_eval_return "
          f"{m['final_eval_return']:.1f} after {m['env_steps']:,} env steps "
          f"(solved at {m['solved_at_step']}), replay {m['replay_time_share']:.1%} of step time")
    return 0


def run_compare(ns: argparse.Namespace) -> int:
    from replaybank.rl import compare

    args = args_from_namespace(compare.CompareArgs, ns)
    compare.run(args)
    print(f"wrote {args.out}/compare.json, compare.md, curves_*.png\n")
    print((Path(args.out) / "compare.md").read_text())
    return 0


def run_offline(ns: argparse.Namespace) -> int:
    from replaybank.rl import offline

    args = args_from_namespace(offline.OfflineArgs, ns)
    result = offline.run(args)
    print(f"wrote {args.out}/offline.json, offline.png; transition updates until the start state's value "
          f"reaches {args.fraction:.0%} of V* (per seed):")
    for scheme, counts in result["updates_to_propagate"].items():
        print(f"  {scheme:<8} {counts}")
    return 0


def run_grpo(ns: argparse.Namespace) -> int:
    from replaybank.rl import grpo_trainer

    args = args_from_namespace(grpo_trainer.GrpoLmArgs, ns)
    result = grpo_trainer.run(args)
    print(f"wrote {args.out}/grpo_lm.json")
    print(grpo_trainer.format_table(result["summary"]))
    return 0


def run_grpo_toy(ns: argparse.Namespace) -> int:
    from replaybank.rl import grpo_demo

    args = args_from_namespace(grpo_demo.GrpoArgs, ns)
    result = grpo_demo.run(args)
    print(f"wrote {args.out}/grpo.json, grpo.png")
    print(json.dumps(result["summary"], indent=2))
    return 0
