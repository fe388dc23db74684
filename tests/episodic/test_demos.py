"""Importing a person's demonstrations: the format, every refusal naming file:line and field, one
transaction (a bad file stores nothing, nothing stored before is lost), the CLI's exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from replaybank.cli import main
from replaybank.episodic import EpisodeStore, Task, demonstration
from replaybank.episodic.demos import (
    MAX_LINE_BYTES,
    DemoFileError,
    import_demonstrations,
    read_demonstrations,
    to_episodes,
)
from replaybank.episodic.export import training_rows
from replaybank.episodic.retrieval import Retriever

CART = "<<qx cart.add; sku=paper_towels; qty=4>>"
PAY = "<<qx purse.send; to=@goran; cents=996>>"


def chain(**over: Any) -> dict[str, Any]:
    line = {
        "id": "pay-1", "task": "Buy 4 paper towels and send Goran the total.",
        "turns": [{"role": "user", "content": "Buy 4 paper towels and send Goran the total."},
                  {"role": "assistant", "content": CART},
                  {"role": "tool", "content": "ok cart.add sku=paper_towels qty=4 total=996"},
                  {"role": "assistant", "content": PAY}],
        "calls": [CART, PAY], "fields": {"payee": "Goran"},
    }
    line.update(over)
    return {k: v for k, v in line.items() if v is not None}


def timer(**over: Any) -> dict[str, Any]:
    line = {"task": "Timer of 300s for tea, account 4417-22.", "family": "timer.arm",
            "turns": [{"role": "user", "content": "Timer of 300s for tea, account 4417-22."},
                      {"role": "assistant", "content": "Sure: <<qx timer.arm; dur=300s; tag=tea>>"}],
            "calls": ["<<qx timer.arm; dur=300s; tag=tea>>"], "fields": {"account": "4417-22"}}
    line.update(over)
    return {k: v for k, v in line.items() if v is not None}


def write(path: Path, *lines: Any) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def test_demonstrations_are_stored_as_demo_episodes_with_their_steps(tmp_path):
    f = write(tmp_path / "d.jsonl", chain(fields=None), "", timer())
    with EpisodeStore(tmp_path / "ep.db") as store:
        got = import_demonstrations(store, f)
        assert got.ids == (1, 2) and got.not_replayable == () and got.private == ()
        pay = store.get(1).episode
        assert pay.source == "demo" and pay.generation == 0 and pay.verdict.success
        assert pay.task.id == "pay-1" and pay.task.family == "cart.add+purse.send" and pay.task.difficulty == 2
        assert pay.task.expected == (CART, PAY)
        assert [m["role"] for m in pay.messages()] == ["user", "assistant", "tool", "assistant"]
        assert pay.steps[1].result == "ok purse.send to=@goran cents=996"  # executed on the runtime
        tea = store.get(2).episode
        assert tea.task.id.startswith("demo-") and tea.steps[0].call == "<<qx timer.arm; dur=300s; tag=tea>>"
        assert [r["episode_id"] for r in training_rows(store)] == [1, 2]


def test_private_fields_are_redacted_and_a_call_redaction_breaks_is_kept_but_never_replayed(tmp_path):
    f = write(tmp_path / "d.jsonl", chain(), timer())
    with EpisodeStore(tmp_path / "ep.db") as store:
        got = import_demonstrations(store, f, ["payee", "account"])
        assert got.not_replayable == (1,) and got.private == ("account", "payee")
        pay, tea = store.get(1).episode, store.get(2).episode
        assert "goran" not in json.dumps(pay.to_dict()).lower() and "4417-22" not in json.dumps(tea.to_dict())
        assert pay.steps[1].output == "<<qx purse.send; to=@<private:payee>; cents=996>>"
        assert not pay.verdict.success and pay.verdict.detail.startswith("demonstration, not replayable: turn 1")
        assert tea.verdict.success and tea.task.text == "Timer of 300s for tea, account <private:account>."
        assert [r["episode_id"] for r in training_rows(store)] == [2]
        assert [r.id for r in Retriever.from_store(store).retrieve("paper towels Goran", 5)] == [2]
    with EpisodeStore(tmp_path / "other.db") as store, pytest.raises(DemoFileError, match=r"d.jsonl:1: calls: redacting"):
        import_demonstrations(store, f, ["payee"], on_redacted_call="refuse")
    with EpisodeStore(tmp_path / "other.db") as store:
        assert len(store) == 0


def test_an_id_made_for_a_line_hashes_the_redacted_text(tmp_path):
    f = write(tmp_path / "d.jsonl", timer())
    plain, = to_episodes(read_demonstrations(f))[0]
    red, = to_episodes(read_demonstrations(f), ["account"])[0]
    assert plain.task.id != red.task.id
    assert red.task.id == to_episodes(read_demonstrations(write(tmp_path / "e.jsonl", timer(
        task="Timer of 300s for tea, account 9999-00.", fields={"account": "9999-00"}))), ["account"])[0][0].task.id


BAD = [
    (timer(extra=1), r":1: unknown field 'extra'"),
    (timer(task=None), r":1: missing field 'task'"),
    (timer(task="  "), r":1: task: empty"),
    (timer(calls="<<qx timer.arm; dur=300s; tag=tea>>"), r":1: calls .* is not a list"),
    (timer(calls=[]), r":1: calls: empty"),
    (timer(calls=["<<qx timer.stop; dur=300s>>"]), r":1: calls\[0\]: .*unknown tool 'timer.stop'"),
    (timer(calls=["<<qx timer.arm; dur=5 minutes; tag=tea>>"]), r":1: calls\[0\]: .*is not seconds"),
    (timer(calls=["<<qx timer.arm; dur=60s; tag=tea>>"]), r":1: calls: .*calls\[0\] is <<qx timer.arm; dur=60s"),
    (timer(turns=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "<<qx sky.fall; k=1>>"}]),
     r":1: turns\[1\].content: .*unknown tool 'sky.fall'"),
    (timer(turns=[{"role": "assistant", "content": "x"}]), r":1: turns\[0\]: the turns start with .* 'user'"),
    (timer(turns=[{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}]), r":1: turns\[1\].role: 'robot'"),
    (timer(turns=[{"role": "user", "content": "x", "name": "me"}]), r":1: turns\[0\]: unknown field 'name'"),
    (timer(turns=[{"role": "user", "content": 3}]), r":1: turns\[0\].content 3 is not a string"),
    (timer(turns=[{"role": "user", "content": "x"}]), r":1: turns: no assistant turn"),
    (timer(turns="hello"), r":1: turns 'hello' is not a list"),
    (chain(turns=chain()["turns"][:2] + [{"role": "tool", "content": "ok cart.add total=1"}] + chain()["turns"][3:]),
     r":1: turns\[2\].content: 'ok cart.add total=1' is not what the qx runtime returns"),
    (chain(turns=chain()["turns"][:2] + chain()["turns"][3:]), r":1: turns\[2\].role: 'assistant' after an assistant turn"),
    (timer(fields={"account": 7}), r":1: fields\['account'\] 7 is not a string"),
    (timer(fields={"Account": "x"}), r":1: fields: field name 'Account'"),
    (timer(id=5), r":1: id 5 is not a string"),
    ('{"task": "x", "task": "y"}', r":1: key 'task' appears twice"),
    ('{"task": NaN}', r":1: NaN is not a number"),
    ("[1, 2]", r":1: expected a JSON object, got list"),
    ("{not json", r":1: malformed JSON"),
    ('{"task": "\\ud800 x", "turns": [], "calls": []}', r":1: task: not encodable as UTF-8"),
    ("[" * 100_000 + "]" * 100_000, r":1: (nested|expected a JSON object)"),
]


@pytest.mark.parametrize(("line", "message"), BAD)
def test_a_bad_line_is_refused_naming_file_line_and_field_and_stores_nothing(tmp_path, line, message):
    f = write(tmp_path / "d.jsonl", timer(id="ok-1", task="A good line, 300s tea."), line)
    message = message.replace(":1:", ":2:")
    db = tmp_path / "ep.db"
    with EpisodeStore(db) as store:
        before = store.add(demonstration(Task("old", "Add 3 eggs."), ["<<qx cart.add; sku=eggs; qty=3>>"]))
        with pytest.raises(DemoFileError, match=message):
            import_demonstrations(store, f, [])
        assert [r.id for r in store.episodes()] == [before] and store.attempt_count() == 1


def test_file_level_refusals(tmp_path):
    good = write(tmp_path / "d.jsonl", timer())
    cases = {
        "dup": (write(tmp_path / "dup.jsonl", timer(id="a"), timer(id="a")), r"dup.jsonl:2: id: 'a' is already the id of line 1"),
        "private": (good, r"d.jsonl: private field 'payee' is not a field of the file \(the 'fields' of its lines: account\)"),
        "empty": (write(tmp_path / "e.jsonl", ""), r"e.jsonl: no demonstrations"),
        "utf8": (tmp_path / "latin.jsonl", r"latin.jsonl:2: not valid UTF-8 \(byte 0xe9"),
        "long": (write(tmp_path / "long.jsonl", timer(task="x" * MAX_LINE_BYTES)), r"long.jsonl:1: line of .* bytes, longer than"),
        "missing": (tmp_path / "none.jsonl", r"none.jsonl: demonstration file not found"),
    }
    (tmp_path / "latin.jsonl").write_bytes(json.dumps(timer()).encode() + b"\n" + '{"task": "caf\xe9"}'.encode("latin-1"))
    for name, (path, message) in cases.items():
        with pytest.raises(DemoFileError, match=message):
            to_episodes(read_demonstrations(path), ["payee"] if name == "private" else [])
    # the same id twice once a private value is redacted
    two = write(tmp_path / "two.jsonl", timer(id="acct-4417-22"), timer(id="acct-5555", fields={"account": "5555"}))
    with pytest.raises(DemoFileError, match=r"two.jsonl:2: id: is the id of line 1 once private values are redacted"):
        to_episodes(read_demonstrations(two), ["account"])


def test_a_fifo_folder_or_link_as_file_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "dir").mkdir()
    os.symlink(write(tmp_path / "d.jsonl", timer()), tmp_path / "link")
    for name, kind in (("pipe", "a FIFO"), ("dir", "a folder"), ("link", "a symbolic link")):
        with pytest.raises(DemoFileError, match=f"{name}: is {kind}"):
            read_demonstrations(tmp_path / name)


def test_the_cli_imports_and_refuses_with_exit_2_and_no_traceback(tmp_path, capsys):
    db = tmp_path / "ep.db"
    f = write(tmp_path / "d.jsonl", chain(), timer())
    assert main(["store", "import", str(db), str(f), "--private", "payee", "--private", "account"]) == 0
    out = capsys.readouterr().out
    assert "stored 2 demonstrations" in out and "private fields redacted: account, payee" in out
    assert "1 kept as records, not replayable (a redacted call; lines 1)" in out
    assert "Goran" not in out and "4417" not in out
    bad = write(tmp_path / "bad.jsonl", timer(id="z"), timer(calls=["<<qx nope.no; a=1>>"]))
    assert main(["store", "import", str(db), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2: calls[0]:" in err and "unknown tool 'nope.no'" in err and "Traceback" not in err
    assert main(["store", "import", str(tmp_path / "new.db"), str(bad)]) == 2
    assert not (tmp_path / "new.db").exists()  # the file is checked before the store is created
    assert main(["store", "import", str(db), str(f), "--private", "payee", "--on-redacted-call", "refuse"]) == 2
    assert "d.jsonl:1: calls: redacting private field(s) payee" in capsys.readouterr().err
    with EpisodeStore(db, readonly=True) as store:
        assert len(store) == 2 and store.attempt_count() == 2
