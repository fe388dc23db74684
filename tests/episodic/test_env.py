from __future__ import annotations

import hashlib
import json

import pytest

from replaybank.episodic import Task, Verdict
from replaybank.episodic.env import (
    Checker,
    CheckerError,
    Environment,
    JsonlTasks,
    QxChecker,
    QxEnvironment,
    TaskFileError,
    TaskSource,
    run_check,
    write_tasks,
)
from replaybank.episodic.qx import parse_calls, validate


def test_ladder_levels_cycle_and_their_answers_check():
    env = QxEnvironment()
    tasks = env.tasks(60, seed=3)
    assert [t.difficulty for t in tasks[:6]] == [1, 2, 3, 1, 2, 3]
    for t in tasks:
        assert len(t.expected) == (2 if t.difficulty == 3 else 1)
        assert all(validate(parse_calls(c)[0]) == [] for c in t.expected)
        assert t.family == "+".join(parse_calls(c)[0].tool for c in t.expected)
        assert run_check(env, t, "\n".join(t.expected)).success
    for t in tasks:
        if t.difficulty == 1:  # copy level: every argument value is in the request verbatim
            assert all(v in t.text for _, v in parse_calls(t.expected[0])[0].args)
        if t.difficulty == 3:
            a, b = t.family.split("+")
            assert a != b


def test_chain_tasks_need_the_total_the_first_call_returns():
    env = QxEnvironment(levels=(4,))
    for split in ("train", "heldout"):
        for t in env.tasks(40, split=split, seed=5):
            cart, pay = (parse_calls(c)[0] for c in t.expected)
            assert (t.difficulty, t.family, cart.tool, pay.tool) == (4, "cart.add>purse.send", "cart.add", "purse.send")
            total = env.execute(t, t.expected[0])[1].rsplit("total=", 1)[1]  # type: ignore[index]
            assert pay.arg_dict["cents"] == total and total not in t.text  # only the result tells it
            assert f"send {pay.arg_dict['to'][1:].capitalize()} the total" in t.text
            assert run_check(env, t, "\n".join(t.expected)).success
    ladder = QxEnvironment(levels=(1, 2, 3, 4))
    assert [t.difficulty for t in ladder.tasks(8, seed=0)] == [1, 2, 3, 4] * 2
    assert ladder.tasks(30, seed=2) == ladder.tasks(90, seed=2)[:30]
    train = ladder.tasks(400, seed=0) + ladder.tasks(400, seed=1)
    heldout = ladder.tasks(120, split="heldout", seed=0) + ladder.tasks(120, split="heldout", seed=7)
    assert not {t.text for t in train} & {t.text for t in heldout}
    assert not {c for t in train for c in t.expected} & {c for t in heldout for c in t.expected}


@pytest.mark.parametrize(
    ("levels", "split", "digest"),
    [((1, 2), "train", "c4c8c07b90b942fe"), ((1, 2), "heldout", "5d945331416e6987"),
     ((1, 2, 3), "train", "afe1a02c30ed1735"), ((1, 2, 3), "heldout", "5b241555630a0ebb")],
)
def test_levels_1_to_3_draw_the_tasks_they_drew_before_level_4_existed(levels, split, digest):
    # digests of the first 64 tasks (seed 0) as drawn by replaybank 330a48b, before chains were added
    tasks = QxEnvironment(levels=levels).tasks(64, split=split, seed=0)
    assert hashlib.sha256(repr([t.to_dict() for t in tasks]).encode()).hexdigest()[:16] == digest


def test_tasks_are_deterministic_prefix_stable_and_splits_disjoint():
    env = QxEnvironment(levels=(2,))
    train = env.tasks(200, seed=0)
    assert [t.id for t in env.tasks(50, seed=0)] == [t.id for t in train[:50]]
    assert env.tasks(200, seed=0) == train
    heldout = env.tasks(60, split="heldout", seed=0) + env.tasks(60, split="heldout", seed=1)
    assert not {t.text for t in train} & {t.text for t in heldout}
    assert len({t.id for t in train}) == 200
    assert {t.id for t in env.tasks(20, seed=1)} != {t.id for t in env.tasks(20, seed=0)}
    ladder = QxEnvironment()
    for split in ("train", "heldout"):
        assert ladder.tasks(50, split=split, seed=2) == ladder.tasks(200, split=split, seed=2)[:50]
    # across every level: no held-out request or expected call is ever a train one
    train = ladder.tasks(600, seed=0) + ladder.tasks(600, seed=1)
    heldout = ladder.tasks(150, split="heldout", seed=0) + ladder.tasks(150, split="heldout", seed=7)
    assert not {t.text for t in train} & {t.text for t in heldout}
    assert not {c for t in train for c in t.expected} & {c for t in heldout for c in t.expected}
    assert all(len({t.id for t in ladder.tasks(300, split=s, seed=3)}) == 300 for s in ("train", "heldout"))


def test_environment_protocols():
    env = QxEnvironment()
    assert isinstance(env, Environment) and isinstance(env, TaskSource) and isinstance(QxChecker(), Checker)
    assert not isinstance(QxChecker(), Environment)
    with pytest.raises(ValueError, match="levels"):
        QxEnvironment(levels=(5,))
    with pytest.raises(ValueError, match="split 'test'"):
        env.tasks(1, split="test")  # type: ignore[arg-type]


def test_a_checker_that_raises_is_named_with_the_task():
    class Broken:
        def check(self, task, output):
            raise KeyError("answer")

    class Liar:
        def check(self, task, output):
            return 1.0

    task = Task("t-7", "What is 2+2?")
    with pytest.raises(CheckerError, match=r"checker Broken raised on task 't-7' .*KeyError: 'answer'"):
        run_check(Broken(), task, "4")
    with pytest.raises(CheckerError, match=r"returned 1.0 for task 't-7'"):
        run_check(Liar(), task, "4")


def test_jsonl_round_trip_and_seeded_order(tmp_path):
    path = tmp_path / "tasks.jsonl"
    env = QxEnvironment()
    write_tasks(path, env.tasks(10, seed=0), "train")
    write_tasks(path, env.tasks(4, split="heldout", seed=0), "heldout")
    src = JsonlTasks(path)
    assert sorted(t.id for t in src.tasks(10)) == sorted(t.id for t in env.tasks(10, seed=0))
    assert src.tasks(4, split="heldout", seed=1) != src.tasks(4, split="heldout", seed=2)
    assert src.tasks(3, seed=5) == src.tasks(3, seed=5)
    t = src.tasks(1, split="heldout")[0]
    assert QxChecker().check(t, "\n".join(t.expected)).success
    with pytest.raises(ValueError, match="asked for 11 train tasks, the file has 10"):
        src.tasks(11)


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "malformed JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"id": "a"}', "'text' must be a non-empty string"),
        ('{"text": "x", "expected": "<<qx a.b>>"}', "'expected' must be a list of strings"),
        ('{"text": "x", "difficulty": "hard"}', "'difficulty' must be an integer"),
        ('{"text": "x", "split": "test"}', "'split' must be one of"),
        ('{"text": "x", "id": 5}', "'id' must be a string"),
        ('{"text": "first", "id": "a"}', "task id 'a' already on line 1"),
    ],
)
def test_malformed_task_lines_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "ok"}) + "\n\n" + line + "\n")
    with pytest.raises(TaskFileError, match=rf"tasks\.jsonl:3: {message}"):
        JsonlTasks(path)


def test_bring_your_own_environment_is_just_two_methods():
    class Echo:
        def tasks(self, n, *, split="train", seed=0):
            return [Task(f"e{i}", f"say {i}", "echo", 1, (str(i),)) for i in range(n)]

        def check(self, task, output):
            return Verdict(output == task.expected[0], float(output == task.expected[0]))

    env = Echo()
    assert isinstance(env, Environment)
    assert [run_check(env, t, "1").success for t in env.tasks(3)] == [False, True, False]
