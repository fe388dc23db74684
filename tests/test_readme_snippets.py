"""The README's Python snippets that run without a model or a long training run, run as written.

Each fenced ``python`` block of README.md is classed here by its first statement: the ones that
need a model, a dataset the reader supplies, or minutes of training are listed in ``NOT_RUN`` with
why; every other block is executed in a fresh namespace inside a temporary working folder, and the
values its comments promise (``# (2, 4) [     0 131073] [1. 1.]``) are compared with what it prints.
A new block is run unless it is added to ``NOT_RUN``.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

#: Blocks not run here, by a fragment of their text, with the reason.
NOT_RUN = {
    "PERDQN(": "trains DQN for 50,000 steps; the drop-in itself: tests/sb3/",
    "SFTTrainer(": "needs the reader's model, tokenizer and datasets; the same calls: tests/hf/test_example_trl.py",
}


def python_blocks(text: str) -> list[str]:
    """The bodies of the fenced ``python`` blocks of ``text``, in order."""
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def runnable_blocks() -> list[str]:
    return [b for b in python_blocks(README.read_text(encoding="utf-8")) if not any(k in b for k in NOT_RUN)]


def test_the_readme_has_the_blocks_this_file_expects() -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 3
    for fragment in NOT_RUN:  # a fragment that no longer matches would silently run nothing less
        assert any(fragment in b for b in blocks), fragment
    assert len(runnable_blocks()) >= 2


@pytest.mark.parametrize("block", runnable_blocks(), ids=lambda b: b.strip().splitlines()[0][:40])
def test_a_readme_block_runs_and_prints_what_its_comments_say(block: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the buffer snippet saves to ckpt/buffer
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})  # noqa: S102 - our own README
    printed = out.getvalue().splitlines()
    promised = [m.group(1).strip() for line in block.splitlines() if "print(" in line
                for m in [re.search(r"#\s*(?:at \d+: )?(.*)$", line)] if m]
    if "set_policy_version" in block:  # the comment gives the last step's batch: "... at 2: [2, 2, ...]"
        step, batch = promised[0].rsplit("at ", 1)[1].split(": ", 1)
        assert printed[-1] == f"{step} {batch}"
    else:
        for want in promised:
            assert want in printed, (want, printed)
