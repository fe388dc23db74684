"""The code changes of docs/trust.md "Code changes the tests catch", each run against the tests
named to catch it.

Each entry of ``MUTATIONS`` is one change to the code: a file, an exact piece of its text and what
replaces it, and the test node ids expected to fail under it. For each, ``src/`` and ``tests/`` (and
the mutated file's top folder) are copied into a fresh temporary folder, the rest of the
repository is linked in, the text is replaced there (it must occur exactly once: a piece of text
found zero or several times is reported *stale*, not skipped), and the named tests run with
``PYTHONPATH=<tmp>/src python -m pytest -q -x -p no:cacheprovider <tests>`` under ``nice``. The
outcome is *caught* (the tests failed), *survived* (they passed) or *stale*. The same tests run
once on the unchanged copy first (the baseline: they must pass, none skipped, or no outcome means
anything).

Run ``nice -n 10 python benchmarks/mutations.py`` (``--only NAME`` for some, ``--list`` to list).
Prints a table, writes ``benchmarks/results/mutations.json`` (commit, date, per mutation: name,
file, the change in one line, tests, outcome, seconds) and exits 1 if any mutation survived or is
stale, or the baseline failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
#: the environment every pytest run gets (offline hub, one thread, trl's warning silenced)
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "OMP_NUM_THREADS": "1"}
#: top-level entries never linked into the copy
SKIP = {".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


@dataclass(frozen=True)
class Mutation:
    """One change to the code and the tests that must fail under it.

    Attributes:
        name: a short unique name.
        file: the changed file, relative to the repository root.
        old: text of ``file`` that must occur exactly once.
        new: what replaces it.
        tests: pytest node ids (relative to the repository root) expected to fail.
        what: the change in words, for the table.
    """

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    what: str


@dataclass(frozen=True)
class Outcome:
    """One mutation's run: the record written to the JSON file.

    Attributes:
        name, file, tests: the mutation's.
        change: the change in one line (``what``: ``old`` -> ``new``).
        outcome: ``caught``, ``survived`` or ``stale`` (``baseline``: ``passed`` or ``failed``).
        seconds: wall time of the pytest run (0 when stale).
        detail: the last lines of pytest's output, or why it is stale.
    """

    name: str
    file: str
    change: str
    tests: tuple[str, ...]
    outcome: str
    seconds: float
    detail: str


def _one_line(text: str, limit: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def change_line(m: Mutation) -> str:
    """The change in one line: its words, then the old and new text squeezed to one line each."""
    return f"{m.what}: `{_one_line(m.old)}` -> `{_one_line(m.new)}`"


def copy_tree(root: Path, dest: Path, copied: Sequence[str]) -> None:
    """``dest`` holds copies of ``copied`` (top-level names of ``root``) and links to every other
    top-level entry, so the tests find the repository's other files where they look for them."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for entry in sorted(root.iterdir()):
        if entry.name in SKIP:
            continue
        if entry.name in copied and entry.is_dir():
            shutil.copytree(entry, dest / entry.name, ignore=ignore, symlinks=True)
        elif entry.name in copied:
            shutil.copy2(entry, dest / entry.name)
        else:
            (dest / entry.name).symlink_to(entry)


def apply(tree: Path, m: Mutation) -> str | None:
    """Replace ``m.old`` by ``m.new`` in ``tree / m.file``; None when done, else why it is stale."""
    path = tree / m.file
    if not path.is_file():
        return f"{m.file}: no such file"
    text = path.read_text()
    count = text.count(m.old)
    if count != 1:
        return f"{m.file}: the old text occurs {count} times (expected exactly once)"
    path.write_text(text.replace(m.old, m.new, 1))
    return None


def run_tests(tree: Path, tests: Sequence[str], timeout: float) -> tuple[bool, float, str]:
    """``(passed, seconds, output tail)`` of the tests run in ``tree`` with ``tree/src`` first on
    the path; a run past ``timeout`` seconds counts as failed."""
    env = {**os.environ, **ENV, "PYTHONPATH": str(tree / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = ["nice", "-n", "10", sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, time.monotonic() - start, f"timed out after {timeout:.0f} s"
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
    return proc.returncode == 0, time.monotonic() - start, tail


def _copied(m: Mutation) -> list[str]:
    return sorted({"src", "tests", Path(m.file).parts[0]})


def run_mutation(root: Path, m: Mutation, timeout: float = 600.0) -> Outcome:
    """Apply ``m`` to a copy of ``root`` and run its tests: ``caught`` if they fail, ``survived``
    if they pass, ``stale`` if its old text is not in the file exactly once."""
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        tree = Path(tmp) / "tree"
        copy_tree(root, tree, _copied(m))
        stale = apply(tree, m)
        if stale is not None:
            return Outcome(m.name, m.file, change_line(m), m.tests, "stale", 0.0, stale)
        passed, seconds, tail = run_tests(tree, m.tests, timeout)
    return Outcome(m.name, m.file, change_line(m), m.tests, "survived" if passed else "caught", round(seconds, 1), tail)


def run_baseline(root: Path, mutations: Sequence[Mutation], timeout: float = 1200.0) -> Outcome:
    """Every mutation's tests on an unchanged copy, in one run: ``passed``, or ``failed`` when one
    failed or was skipped."""
    tests = tuple(dict.fromkeys(t for m in mutations for t in m.tests))
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        tree = Path(tmp) / "tree"
        copy_tree(root, tree, sorted({d for m in mutations for d in _copied(m)}))
        passed, seconds, tail = run_tests(tree, tests, timeout)
    # a skipped test catches nothing: the baseline must run every test it names
    outcome = "passed" if passed and " skipped" not in (tail.splitlines() or [""])[-1] else "failed"
    return Outcome("baseline", "-", "no change", tests, outcome, round(seconds, 1), tail)


def table(outcomes: Sequence[Outcome]) -> str:
    """A markdown table: mutation, file, outcome, seconds."""
    lines = ["| mutation | file | outcome | s |", "|---|---|---|---|"]
    lines += [f"| {o.name} | `{o.file}` | {o.outcome} | {o.seconds:.1f} |" for o in outcomes]
    return "\n".join(lines)


def failing(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The outcomes that make the run fail: a survivor, a stale mutation, a failed baseline."""
    return [o for o in outcomes if o.outcome in ("survived", "stale", "failed")]


def _commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def _sb3(name: str, old: str, new: str, tests: tuple[str, ...], what: str) -> Mutation:
    return Mutation(name, "src/replaybank/sb3/buffers.py", old, new, tests, what)


SB3_TESTS = "tests/sb3/test_sb3_buffers.py"
CLEANRL = "tests/rl/test_example_cleanrl.py"
ROUTE = "tests/llm/adapters/test_adapter_route.py"
TRACES = "tests/traces/test_interventions.py"
CONTRACT = "tests/controllers/test_contract.py"

#: the code changes; each must make at least one of its tests fail
MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "perdqn_unweighted_loss", "src/replaybank/sb3/dqn.py",
        "loss = (data.weights * per_item).mean()", "loss = per_item.mean()",
        ("tests/sb3/test_sb3_dqn.py::test_perdqn_loss_is_the_importance_weighted_huber_loss",),
        "PERDQN's loss without the importance weights",
    ),
    Mutation(
        "perdqn_no_priority_update", "src/replaybank/sb3/dqn.py",
        "            buffer.update_priorities(data.ids, self.last_td_errors)\n", "",
        ("tests/sb3/test_sb3_dqn.py::test_perdqn_weights_the_loss_and_updates_priorities",),
        "PERDQN never sets the sampled items' priorities to their absolute TD error",
    ),
    _sb3(
        "sb3_sampled_next_obs_is_obs",
        'arrays = (obs, data["action"], next_obs, ', 'arrays = (obs, data["action"], obs, ',
        (f"{SB3_TESTS}::test_samples_carry_each_transitions_own_next_obs_and_reward",),
        "the SB3 buffers sample next_obs = obs",
    ),
    _sb3(
        "sb3_stored_next_obs_is_obs",
        "next_obs=next_obs.reshape(shape),", "next_obs=obs.reshape(shape),",
        (f"{SB3_TESTS}::test_samples_carry_each_transitions_own_next_obs_and_reward",),
        "the SB3 buffers store next_obs = obs (one env)",
    ),
    _sb3(
        "sb3_stored_zero_reward",
        "reward=reward.item(),", "reward=0.0,",
        (f"{SB3_TESTS}::test_samples_carry_each_transitions_own_next_obs_and_reward",),
        "the SB3 buffers store zero rewards (one env)",
    ),
    _sb3(
        "sb3_sampled_zero_reward",
        'data["reward"].reshape(-1, 1)', 'data["reward"].reshape(-1, 1) * 0',
        (f"{SB3_TESTS}::test_samples_carry_each_transitions_own_next_obs_and_reward",),
        "the SB3 buffers sample zero rewards",
    ),
    _sb3(
        "sb3_vec_normalize_ignored",
        "        if env is not None:\n            # SB3 types",
        "        if False:\n            # SB3 types",
        (f"{SB3_TESTS}::test_a_vec_normalize_env_scales_the_sampled_rewards_and_observations_as_sb3_does",),
        "the SB3 buffers ignore a VecNormalize env",
    ),
    _sb3(
        "sb3_timeouts_not_bootstrapped",
        'timeout = self.handle_timeout_termination and infos[0].get("TimeLimit.truncated", False)',
        "timeout = False",
        (f"{SB3_TESTS}::test_timeouts_bootstrap_like_sb3",),
        "the SB3 buffers store a time-limit truncation as a terminal (one env)",
    ),
    _sb3(
        "cleanrl_info_dict_refused",
        "        if isinstance(infos, Mapping):  # a gymnasium vector env's infos (CleanRL passes them): one dict of arrays\n"
        "            if self.handle_timeout_termination:",
        "        if isinstance(infos, Mapping):  # a gymnasium vector env's infos (CleanRL passes them): one dict of arrays\n"
        "            if True:",
        (f"{CLEANRL}::test_cleanrls_own_dqn_lines_run_on_the_sb3_drop_in",),
        "the SB3 buffer refuses a gymnasium infos dict (CleanRL's rb.add)",
    ),
    _sb3(
        "cleanrl_actions_flat",
        'arrays = (obs, data["action"], ', 'arrays = (obs, data["action"].reshape(-1), ',
        (f"{CLEANRL}::test_cleanrls_own_dqn_lines_run_on_the_sb3_drop_in",),
        "the SB3 buffers sample actions (B,) instead of (B, 1) (CleanRL's gather)",
    ),
    _sb3(
        "cleanrl_batches_not_attribute_style",
        "return ReplayBufferSamples(*self._tensors(self.bank.sample(batch_size).data, env))",
        "return tuple(self._tensors(self.bank.sample(batch_size).data, env))",
        (f"{CLEANRL}::test_cleanrls_own_dqn_lines_run_on_the_sb3_drop_in",),
        "the uniform SB3 buffer samples a plain tuple (CleanRL reads data.observations)",
    ),
    Mutation(
        "gate_arm_ignored", "src/replaybank/llm/report/metrics.py",
        'chosen, by = (gate_arm, "gate_arm") if gate_arm',
        'chosen, by = (targets.best_arm, "gate_arm") if gate_arm',
        ("tests/llm/report/test_flips.py::test_the_gate_judges_the_configured_gate_arm_not_the_best_arm",),
        "the main job's gate judges the targets' best arm whatever [evaluation] gate_arm says",
    ),
    Mutation(
        "onpolicy_never_yields", "src/replaybank/llm/train/sources.py",
        "return encode_domain(ctx.tokenizer, records, max_seq_length) if records else None", "return None",
        ("tests/llm/data/test_onpolicy.py::test_the_main_job_rehearses_the_models_accepted_answers_to_earlier_domains",),
        "the main job's onpolicy source never yields a row",
    ),
    Mutation(
        "empty_sources_unlisted", "src/replaybank/llm/train/sources.py",
        "return [name for name in spec.source if name not in have]", "return []",
        ("tests/llm/data/test_onpolicy.py::test_the_main_job_rehearses_the_models_accepted_answers_to_earlier_domains",),
        "a generation whose source gave no row does not list it in empty_sources",
    ),
    Mutation(
        "earlier_only_arm_accepted", "src/replaybank/llm/config/parse.py",
        "plan = next((p for p in plans if p.recipe.source and all(s in EARLIER_SOURCES for s in p.recipe.source)), None)",
        "plan = None",
        ("tests/llm/data/test_onpolicy.py::test_an_arm_whose_only_sources_never_have_rows_is_refused",),
        "an arm of replay/onpolicy alone that could never get a row is accepted",
    ),
    Mutation(
        "traces_semantics_is_baseline", "src/replaybank/traces/interventions.py",
        '"semantics": replace(base, semantics="token"),', '"semantics": base,',
        (f"{TRACES}::test_each_intervention_moves_the_cache_the_way_its_factor_says",),
        "the traces' semantics intervention equals its baseline",
    ),
    Mutation(
        "traces_mixing_is_baseline", "src/replaybank/traces/interventions.py",
        '"mixing": replace(base, mixed=True),', '"mixing": base,',
        (f"{TRACES}::test_each_intervention_moves_the_cache_the_way_its_factor_says",),
        "the traces' mixing intervention equals its baseline",
    ),
    Mutation(
        "traces_prefetch_is_baseline", "src/replaybank/traces/interventions.py",
        '"prefetch": replace(base, prefetch=self.prefetch),', '"prefetch": base,',
        (f"{TRACES}::test_each_intervention_moves_the_cache_the_way_its_factor_says",),
        "the traces' prefetch intervention equals its baseline",
    ),
    Mutation(
        "traces_capacity_is_baseline", "src/replaybank/traces/interventions.py",
        '"capacity": replace(base, ratio=self.alt_ratio),', '"capacity": base,',
        (f"{TRACES}::test_each_intervention_moves_the_cache_the_way_its_factor_says",),
        "the traces' capacity intervention equals its baseline",
    ),
    Mutation(
        "traces_study_replays_baseline", "src/replaybank/traces/interventions.py",
        "alt = replay([trace], design.changed(factor), design, seed)",
        "alt = replay([trace], design.baseline(), design, seed)",
        (f"{TRACES}::test_each_intervention_moves_the_cache_the_way_its_factor_says",),
        "run_study replays the baseline setting as each intervention",
    ),
    Mutation(
        "route_background_rule_removed", "src/replaybank/llm/adapters/route.py",
        "conf[best] > 0 and conf[best] > conf[BACKGROUND]", "conf[best] > 0",
        (f"{ROUTE}::test_a_request_the_background_matches_at_least_as_well_goes_to_the_base_even_above_the_threshold",),
        "the router drops 'the background matches at least as well -> base'",
    ),
    Mutation(
        "route_background_rule_strict", "src/replaybank/llm/adapters/route.py",
        "conf[best] > conf[BACKGROUND]", "conf[best] >= conf[BACKGROUND]",
        (f"{ROUTE}::test_a_request_the_background_matches_at_least_as_well_goes_to_the_base_even_above_the_threshold",),
        "the router sends a tie with the background to the adapter (strict rule)",
    ),
    Mutation(
        "bandit_no_importance_weight", "src/replaybank/controllers/bandit.py",
        "gain[arm] = reward[arm] * int(mask[1:].sum()) if read[arm] else 0.0",
        "gain[arm] = reward[arm] if read[arm] else 0.0",
        ("tests/controllers/test_bandit.py::test_sampled_feedback_weights_the_probed_reward_by_the_number_of_available_sources",),
        "the bandit's sampled feedback without its importance weight",
    ),
    Mutation(
        "hf_controller_losses_swapped", "src/replaybank/hf/controller.py",
        "self.controller, self.names, self.k = controller, (domain, rehearsal), k",
        "self.controller, self.names, self.k = controller, (rehearsal, domain), k",
        ("tests/hf/test_controller_callback.py::test_each_eval_loss_is_read_as_its_own_source",),
        "the hf ControllerCallback reads the domain and rehearsal losses swapped",
    ),
    Mutation(
        "config_literal_unchecked", "src/replaybank/llm/config/values.py",
        "        if value not in choices:\n", "        if False:\n",
        ("tests/llm/config/test_config_fuzz.py::test_a_value_outside_a_literal_keys_choices_is_refused_naming_the_table_and_key",),
        "the config reader accepts any value of a Literal key",
    ),
    Mutation(
        "kl_on_every_row", "src/replaybank/llm/train/kl.py",
        "    mask = labelled & row\n", "    mask = labelled\n",
        ("tests/llm/train/test_kl.py::test_the_kl_mask_holds_the_completion_of_rehearsal_rows_only_and_with_all_the_others_prompts",),
        "the KL term on the labelled positions of every row, not the rehearsal rows only",
    ),
    Mutation(
        "bandit_resume_ignores_state", "src/replaybank/controllers/bandit.py",
        "self._t, self._score, self._prior, self._seen = t, score, prior, seen",
        "del t, score, prior, seen",
        (f"{CONTRACT}::test_resume_from_a_saved_state_equals_the_uninterrupted_controller",),
        "the bandit controller's load_state_dict ignores the saved scores and step",
    ),
    Mutation(
        "proxy_resume_ignores_state", "src/replaybank/controllers/proxy.py",
        "self._loss, self._trend = loss, trend", "del loss, trend",
        (f"{CONTRACT}::test_resume_from_a_saved_state_equals_the_uninterrupted_controller",),
        "the proxy controller's load_state_dict ignores the saved losses and trends",
    ),
    Mutation(
        "mix_credit_not_carried", "src/replaybank/quotas.py",
        "credit = credit + frac", "credit = frac",
        ("tests/test_mixing.py::test_mixer_long_run_share_is_exact",),
        "the quota rounding drops the credit carried between batches (the long-run share drifts)",
    ),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="run these mutations by name")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unchanged run")
    parser.add_argument("--out", type=Path, default=RESULTS / "mutations.json")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if args.only is None or m.name in args.only]
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name}: {change_line(m)}")
        return 0
    unknown = set(args.only or ()) - {m.name for m in MUTATIONS}
    if unknown:
        parser.error(f"unknown mutations: {', '.join(sorted(unknown))}")
    outcomes = [] if args.no_baseline else [run_baseline(ROOT, chosen)]
    if outcomes:
        print(f"baseline: {outcomes[0].outcome} ({outcomes[0].seconds:.1f} s)", flush=True)
    for m in chosen:
        o = run_mutation(ROOT, m)
        print(f"{m.name}: {o.outcome} ({o.seconds:.1f} s)", flush=True)
        outcomes.append(o)
    print(table(outcomes))
    record = {
        "command": "nice -n 10 python benchmarks/mutations.py" + (f" --only {' '.join(args.only)}" if args.only else ""),
        "commit": _commit(ROOT),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "mutations": [asdict(o) for o in outcomes],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    bad = failing(outcomes)
    for o in bad:
        print(f"FAIL {o.name}: {o.outcome}: {o.detail}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
