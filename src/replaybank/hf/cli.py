"""``replaybank synth`` (self-synthesized rehearsal rows to a file) and ``replaybank model path``.

Thin: parse, call :mod:`replaybank.hf.embedded`. No torch import at module level.
"""

from __future__ import annotations

import argparse
from typing import Any

SYNTH_EPILOG = """\
examples:
  replaybank synth --out rows.jsonl                          # 200 rows of the embedded model, TRL's conversational format
  replaybank synth --out rows.parquet --rows 500 --seed 1 --format prompt-completion
  replaybank synth --out rows.jsonl --model path/to/model --prompts my_prompts.txt
"""


def add_subcommands(subparsers: Any) -> None:
    """Add ``synth`` and ``model`` to the top-level ``replaybank`` parser."""
    from replaybank.hf.embedded import FORMATS

    synth = subparsers.add_parser(
        "synth",
        help="self-synthesized rehearsal rows (the base model's own answers) to a JSONL/Parquet file",
        description="Write rehearsal rows the base model writes itself (its greedy answers to general "
        "prompts, filtered; the evaluation suite's prompts excluded) in TRL's dataset formats, for "
        "any trainer. Cached: the same model, seed and settings give the same rows at once.",
        epilog=SYNTH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    synth.add_argument("--out", required=True, help="output file, .jsonl or .parquet")
    synth.add_argument("--rows", type=int, default=200, help="rows wanted (default 200)")
    synth.add_argument("--seed", type=int, default=0, help="draws the prompts (default 0)")
    synth.add_argument("--format", choices=FORMATS, default="conversational",
                       help="TRL dataset format (default conversational: prompt/completion turns)")  # fmt: skip
    synth.add_argument(
        "--model", default=None, help="model folder or .gguf file (default: the embedded SmolLM2)"
    )
    synth.add_argument(
        "--prompts",
        default="builtin",
        help="prompt pool: builtin, a file, magpie or builtin+magpie",
    )
    synth.add_argument("--max-new-tokens", type=int, default=96)
    synth.add_argument("--batch-size", type=int, default=16, help="generation batch size")
    synth.add_argument("--cache-dir", default=None, help="default: $REPLAYBANK_CACHE/selfsynth")
    synth.set_defaults(func=cmd_synth)
    model = subparsers.add_parser(
        "model", help="the embedded base model: 'replaybank model path' prints its folder"
    )
    model.add_argument(
        "action", choices=["path"], help="path: print the folder of the fp32 copy (made once)"
    )
    model.set_defaults(func=cmd_model)


def cmd_synth(args: argparse.Namespace) -> int:
    from replaybank.hf.embedded import check_out, self_rows, write_rows
    from replaybank.hf.plan import MixError
    from replaybank.llm.model import load_model

    if args.rows < 1:
        raise MixError(f"--rows must be >= 1, got {args.rows}")
    check_out(args.out)  # before any generation
    model = tok = None
    if args.model is not None:
        model, tok = load_model(args.model)
    manifest: dict[str, Any] = {}
    rows = self_rows(
        model, tok, n_rows=args.rows, seed=args.seed, row_format=args.format, prompts=args.prompts,
        cache_dir=args.cache_dir, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
        manifest=manifest,
    )  # fmt: skip
    out = write_rows(rows, args.out)
    dropped = ", ".join(f"{k} {v}" for k, v in manifest.get("dropped", {}).items() if v)
    print(
        f"{out}: {len(rows)} rows ({args.format}), {manifest.get('generated', 0)} answers generated"
        + (f", dropped: {dropped}" if dropped else "")
        + (" (read from the cache)" if manifest.get("cached") else "")
    )
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    from replaybank.hf.embedded import embedded_model

    print(embedded_model())
    return 0
