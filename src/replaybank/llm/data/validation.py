"""Validation domain requests: the held-out requests an operating point is chosen on, never the test ones.

For a built-in domain (``builtin:toolapi``, ...) they are drawn from the domain's generator with
their own seed (``training.seed + 20000 + 100 k`` for the ``k``-th ``[data] domain_eval`` source;
the test requests use ``+ 10000``), excluding every test and training prompt. For a file they are
the rows after the test rows (rows ``domain_eval_rows`` to ``2 domain_eval_rows`` of the file);
rows whose prompt is a test or training prompt are dropped. Either way, :func:`validation_requests`
checks that no validation prompt is a test or training prompt.
"""

from __future__ import annotations

from typing import Any

from replaybank.llm.config import Config
from replaybank.llm.data.corpus import CorpusError
from replaybank.llm.data.prepare import BUILTINS, Prepared, load_domain

__all__ = ["VALIDATION_SEED_OFFSET", "validation_requests"]

VALIDATION_SEED_OFFSET = 20_000


def validation_requests(cfg: Config, data: Prepared) -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
    """One list of validation records per distinct ``[data] domain_eval`` source (in order), and a manifest.

    Raises:
        CorpusError: a file with no row beyond its test rows that is not a test or training prompt,
            or (never expected) a validation prompt that is a test or training prompt.
    """
    d, t = cfg.data, cfg.training
    test = {r["prompt"] for recs in data.domain_eval_records for r in recs if "prompt" in r}
    train = {r["prompt"] for recs in data.domain_train_records for r in recs if "prompt" in r}
    out: list[list[dict[str, Any]]] = []
    manifest: list[dict[str, Any]] = []
    for k, source in enumerate(dict.fromkeys(d.domain_eval)):
        if source in BUILTINS:
            seed = t.seed + VALIDATION_SEED_OFFSET + 100 * k
            recs, man = load_domain(source, d.domain_eval_rows, seed=seed, exclude=test | train)
            how = f"drawn from the generator with seed {seed}, test and training prompts excluded"
        else:
            every, man = load_domain(source, 0, seed=0, split=d.domain_split)
            rest = every[d.domain_eval_rows: 2 * d.domain_eval_rows]
            recs = [r for r in rest if r.get("prompt") not in test | train]
            how = f"rows {d.domain_eval_rows}-{d.domain_eval_rows + len(rest) - 1} of the file (after the test rows), test and training prompts dropped"
            if not recs:
                raise CorpusError(f"{source}: [evaluation] choose = \"floor\" needs validation requests after the first "
                                  f"[data] domain_eval_rows = {d.domain_eval_rows} test rows, and the file has "
                                  f"{len(every)} rows, none of them left; add rows or lower domain_eval_rows")
        shared = [r["prompt"] for r in recs if r.get("prompt") in test | train]
        if shared:
            raise CorpusError(f"{source}: validation request {shared[0]!r} is also a test or training prompt")
        out.append(recs)
        manifest.append({"source": source, "rows": len(recs), "how": how, "sha256": man.get("sha256")})
    return out, {"domain": manifest}
