"""The fuzz figures of docs/trust.md: each fuzz test file run under pytest at a fixed example count
and seed, with hypothesis's own count of the outcomes the tests record.

Run ``nice -n 19 python benchmarks/fuzz_table.py --examples 300`` (``--examples 5000`` for the
long run). Each file in ``FILES`` runs in its own pytest process, one after another, with
``FUZZ_EXAMPLES`` set, ``--hypothesis-seed``, ``--hypothesis-show-statistics`` and a fresh
hypothesis database (so no example saved by an earlier run is replayed first). The outcome of
each example is what the test passes to hypothesis's ``event()`` ("add: recorded",
"state.json: StateError (generations)", ...); the statistics give each event as a share of the
generated test cases, turned back into a count here. A test passes only if every example ended in
an expected outcome; a failing test is classed by its first failure: *hang* (a call past its
``bounded`` limit), *check* (an assertion: a refusal that changed something, an accepted input
that the next use found wrong, a write outside the folder) or *crash* (any other exception).

Writes ``benchmarks/results/fuzz_table.json`` (the command, example count, seed, commit, date,
the machine's load average before and after each file) and prints the markdown table.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

#: each fuzz test file, with what each of its hypothesis tests fuzzes (the table's first column)
FILES: dict[str, dict[str, str]] = {
    "tests/episodic/test_episode_fuzz.py": {
        "test_add_records_or_refuses_and_reads_back": "episodes: `add` of random episodes",
        "test_a_tampered_body_reads_back_or_is_a_corrupt_store_error": "episodes: a stored body replaced by random (non-)JSON",
    },
    "tests/llm/train/test_resume_fuzz.py": {
        "test_state_json_is_refused_whole_or_everything_that_reads_it_works": "loop state: `state.json` with 1 to 3 random edits",
        "test_checkpoint_is_refused_whole_or_training_resumes_well_formed": "LoRA checkpoint: `checkpoint.pt` with 1 to 3 random edits",
    },
    "tests/llm/config/test_config_fuzz.py": {
        "test_the_main_config_is_refused_naming_the_file_or_every_value_is_in_bounds": "configs: the main job's TOML",
        "test_the_loop_config_is_refused_naming_the_file_or_every_value_is_in_bounds": "configs: the loop's TOML",
        "test_recipe_tables_are_refused_naming_the_file_or_are_names_in_bounds": "configs: recipe tables (`load_recipes`)",
    },
    "tests/test_mixing_state_fuzz.py": {
        "test_mixer_state_is_refused_whole_or_resumes_well_formed": "mixer state",
        "test_plan_state_is_refused_whole_or_resumes_well_formed": "`MixPlan` state",
    },
    "tests/hf/test_mix_state.py": {
        "test_random_stream_state_edits_are_refused_whole_or_resume": "`mix()` stream state",
    },
    "tests/rl/test_rollouts_fuzz.py": {
        "test_calls_succeed_well_formed_or_refuse_changing_nothing": "rollouts: random call sequences, up to 12 calls",
        "test_a_state_is_refused_whole_or_loads_and_serves": "rollouts: saved state with entries replaced, deleted or added",
    },
    "tests/test_ratelimit_fuzz.py": {
        "test_limiter_parameters_and_state": "rate limiters: random arguments and states",
    },
}

#: events hypothesis records about its own generation (a retried filter), not an outcome of the test
GENERATOR_EVENTS = ("Retried draw from", "Draw for ", "Aborted test because")

#: the statistics print each event's share with two decimals, so a count read back from it is
#: exact while the generated test cases number fewer than this
EXACT_BELOW = 10_000


@dataclass(frozen=True)
class Surface:
    """One hypothesis test: what it fuzzes and how each example ended."""

    test: str  # pytest node id
    surface: str
    examples: int  # passing examples of the generate phase (the test's max_examples when it passed)
    invalid: int  # test cases hypothesis drew and discarded (a filter or size limit), not counted
    outcomes: dict[str, int]  # event -> examples that recorded it (an example may record several)
    counts_exact: bool  # False when the test cases were too many for two-decimal shares to give exact counts
    passed: bool
    failure: str | None  # "hang", "check" or "crash", then the first line of the failure
    stopped_because: str
    wall_s: float  # pytest's time for the test


@dataclass(frozen=True)
class FileRun:
    """One fuzz test file under pytest."""

    file: str
    command: str
    returncode: int | None  # None: stopped at --file-timeout
    passed: int  # every test of the file, the fixed-case ones included
    failed: int
    skipped: int
    wall_s: float  # the whole pytest process, imports included
    load_before: tuple[float, float, float]  # os.getloadavg(): 1, 5 and 15 minutes
    load_after: tuple[float, float, float]
    surfaces: list[Surface]


@dataclass(frozen=True)
class FuzzTable:
    """What ``benchmarks/results/fuzz_table.json`` holds."""

    command: str
    examples: int  # FUZZ_EXAMPLES: max_examples of every hypothesis test
    seed: int
    commit: str
    worktree_clean: bool
    date: str  # UTC, ISO 8601, when the run started
    python: str
    hypothesis: str
    cpus: int
    files: list[FileRun]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _statistics(xml: ET.Element) -> dict[str, str]:
    """Node id -> hypothesis's statistics text, as the pytest plugin puts it in the junit XML."""
    prefix = "hypothesis-statistics-"
    return {p.get("name", "")[len(prefix):]: base64.b64decode(p.get("value", "")).decode()
            for p in xml.iter("property") if p.get("name", "").startswith(prefix)}


def _generate_phase(text: str, node: str) -> tuple[int, int, int, dict[str, int], bool, str]:
    """Passing, failing and invalid cases of the generate phase, the outcome counts, whether the
    counts are exact, and why hypothesis stopped, read from one test's statistics text."""
    phase = re.search(r"during generate phase .*?(?=\n  - (?:during|Stopped)|\Z)", text, re.S)
    if phase is None:
        raise ValueError(f"{node}: no generate phase in its hypothesis statistics:\n{text}")
    counts = re.search(r"(\d+) passing, (\d+) failing, and (\d+) invalid test cases", phase.group(0))
    if counts is None:
        raise ValueError(f"{node}: no case counts in its generate phase:\n{phase.group(0)}")
    passing, failing, invalid = map(int, counts.groups())
    cases = passing + failing + invalid
    outcomes: dict[str, int] = {}
    for share, event in re.findall(r"^\s+\* ([\d.]+)%, (.*)$", phase.group(0), re.M):
        if not event.startswith(GENERATOR_EVENTS):
            outcomes[event] = round(float(share) * cases / 100)
    stopped = re.search(r"Stopped because (.*)", text)
    return passing, failing, invalid, outcomes, cases < EXACT_BELOW, stopped.group(1) if stopped else ""


def _failure_kind(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    if "ran past its" in message:  # the message of conftest's ``bounded``
        kind = "hang"
    elif first.startswith(("AssertionError", "Failed")):
        kind = "check"
    else:
        kind = "crash"
    return f"{kind}: {first[:300]}"


def run_file(file: str, labels: dict[str, str], examples: int, seed: int, timeout_s: float) -> FileRun:
    with tempfile.TemporaryDirectory(prefix="fuzz_table_") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", f"--hypothesis-seed={seed}",
               "--hypothesis-show-statistics", f"--junitxml={junit}", file]
        env = {**os.environ, "FUZZ_EXAMPLES": str(examples), "HYPOTHESIS_STORAGE_DIRECTORY": str(Path(tmp) / "hypothesis"),
               "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
        load_before = os.getloadavg()
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
            returncode: int | None = proc.returncode
            output = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as err:
            returncode, output = None, str(err.output or "")
        wall = time.monotonic() - start
        load_after = os.getloadavg()
        if returncode is None:  # the file ran past --file-timeout: every fuzz test counts as hung
            stopped = _failure_kind(f"the file ran past its {timeout_s:.0f} s bound (--file-timeout)")
            surfaces = [Surface(test=f"{file}::{name}", surface=label, examples=0, invalid=0, outcomes={},
                                counts_exact=True, passed=False, failure=stopped, stopped_because="",
                                wall_s=round(wall, 1)) for name, label in labels.items()]
            return FileRun(file=file, command=shlex.join(_shown(cmd, examples)), returncode=None, passed=0,
                           failed=len(surfaces), skipped=0, wall_s=round(wall, 1), load_before=_load(load_before),
                           load_after=_load(load_after), surfaces=surfaces)
        if not junit.exists():
            raise RuntimeError(f"{file}: pytest wrote no report (exit {returncode}):\n{output[-3000:]}")
        xml = ET.parse(junit).getroot()
    stats = _statistics(xml)
    cases = {f"{file}::{case.get('name')}": case for case in xml.iter("testcase")}
    results = {node: (case.find("failure") if case.find("failure") is not None else case.find("error"))
               for node, case in cases.items()}
    skipped = sum(case.find("skipped") is not None for case in cases.values())
    failed = sum(bad is not None for bad in results.values())
    surfaces = []
    for node, case in cases.items():
        name = node.split("::")[-1]
        bad = results.get(node)
        if node not in stats:
            if name in labels:  # a fuzz test that errored before hypothesis ran it, or was skipped
                why = (bad.get("message", "") if bad is not None else "") or "skipped, or no hypothesis statistics"
                surfaces.append(Surface(test=node, surface=labels[name], examples=0, invalid=0, outcomes={},
                                        counts_exact=True, passed=False, failure=_failure_kind(why),
                                        stopped_because="", wall_s=float(case.get("time", "nan"))))
            continue
        passing, failing, invalid, outcomes, exact, stopped = _generate_phase(stats[node], node)
        failure = None if bad is None and failing == 0 else _failure_kind(
            (bad.get("message", "") if bad is not None else "") or "failing example without a pytest failure")
        surfaces.append(Surface(test=node, surface=labels.get(name, name), examples=passing, invalid=invalid,
                                outcomes=outcomes, counts_exact=exact, passed=failure is None, failure=failure,
                                stopped_because=stopped, wall_s=float(case.get("time", "nan"))))
    missing = sorted(set(labels) - {s.test.split("::")[-1] for s in surfaces})
    if missing:
        raise RuntimeError(f"{file}: no test named {', '.join(missing)} ran (renamed?)\n{output[-3000:]}")
    return FileRun(file=file, command=shlex.join(_shown(cmd, examples)), returncode=returncode,
                   passed=len(cases) - failed - skipped, failed=failed, skipped=skipped, wall_s=round(wall, 1),
                   load_before=_load(load_before), load_after=_load(load_after), surfaces=surfaces)


def _shown(cmd: list[str], examples: int) -> list[str]:
    """The pytest command as a reader would type it (without the temporary report file)."""
    return [f"FUZZ_EXAMPLES={examples}", "python", *(a for a in cmd[1:] if not a.startswith("--junitxml"))]


def _load(avg: tuple[float, float, float]) -> tuple[float, float, float]:
    return (round(avg[0], 2), round(avg[1], 2), round(avg[2], 2))


def _n(k: int) -> str:
    return f"{k:,}"


def _s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def _outcomes(s: Surface) -> str:
    text = ", ".join(f"{_n(k)} {event}" for event, k in sorted(s.outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    return text if s.counts_exact else text + " (each ±1)"


def markdown(table: FuzzTable) -> str:
    head = ("| surface (test) | examples | result | outcomes (examples per event) | wall | load average before / after |\n"
            "|---|---|---|---|---|---|")
    rows = []
    for f in table.files:
        for k, s in enumerate(f.surfaces):
            label = f"{s.surface} (`{f.file}`)" if k == 0 else s.surface
            result = "passed" if s.passed else f"**failed**, {s.failure}"
            load = (f"{f.load_before[0]:.1f} / {f.load_after[0]:.1f}" if k == 0 else "")
            wall = _s(s.wall_s) + (f" (file {_s(f.wall_s)})" if k == 0 else "")
            rows.append(f"| {label} | {_n(s.examples)} | {result} | {_outcomes(s)} | {wall} | {load} |")
    return "\n".join([head, *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="FUZZ_EXAMPLES: examples per hypothesis test")
    parser.add_argument("--seed", type=int, default=29, help="--hypothesis-seed")
    parser.add_argument("--file-timeout", type=float, default=3600.0, help="seconds before a file's run is stopped")
    parser.add_argument("--out", type=Path, default=RESULTS / "fuzz_table.json")
    parser.add_argument("--only", nargs="*", default=None, help="run these files of FILES only (for sizing a run)")
    args = parser.parse_args()
    if args.examples < 1:
        parser.error(f"--examples {args.examples}: expected an integer >= 1")
    unknown = sorted(set(args.only or []) - set(FILES))
    if unknown:
        parser.error(f"--only {' '.join(unknown)}: not among the fuzz files {', '.join(FILES)}")
    import hypothesis

    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    runs = []
    for file, labels in FILES.items():
        if args.only is None or file in args.only:
            runs.append(run_file(file, labels, args.examples, args.seed, args.file_timeout))
            print(f"{file}: {runs[-1].passed} passed, {runs[-1].failed} failed, {runs[-1].wall_s:.0f} s", file=sys.stderr)
    table = FuzzTable(command=shlex.join(["python", "benchmarks/fuzz_table.py", *sys.argv[1:]]), examples=args.examples,
                      seed=args.seed, commit=_git("rev-parse", "HEAD"),
                      worktree_clean=not _git("status", "--porcelain", "--untracked-files=no"), date=date,
                      python=sys.version.split()[0], hypothesis=hypothesis.__version__, cpus=os.cpu_count() or 0,
                      files=runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dataclasses.asdict(table), indent=1) + "\n", encoding="utf-8")
    print(markdown(table))
    if any(f.failed or f.returncode != 0 for f in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
