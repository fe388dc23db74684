"""Private fields never reach a written file: a person's demonstrations carrying private values are
imported (``replaybank store import``) and seeded into a loop run (``[loop] demos_file`` and
``private_fields``) whose tasks mention the same values; then every file written (the stores with
their WAL, the exported training rows, ``store inspect`` output, state.json, adapters, the adapter
library, report.md, metrics.json) is scanned byte for byte for each value: none is found."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from replaybank.cli import main
from replaybank.episodic import EpisodeStore
from replaybank.episodic.demos import DemoFileError
from replaybank.episodic.export import training_rows
from replaybank.llm.config import ConfigError
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.loop.report import write_report
from replaybank.llm.recipes.loop import run_loop

#: field -> value; the handle @zoltan in a call is the payee written in lower case
PRIVATE = {"payee": "Zoltan", "account": "DE44-5001-0517", "customer": "Zürich-Höfe"}
CART = "<<qx cart.add; sku=eggs; qty=3>>"


def demo_lines() -> list[dict[str, object]]:
    pay = "<<qx purse.send; to=@zoltan; cents=96>>"
    buy = f"Add 3 eggs for {PRIVATE['customer']} and send Zoltan the total."
    bill = f"Set a timer of 300s for tea, then bill account {PRIVATE['account']}."
    timer = "<<qx timer.arm; dur=300s; tag=tea>>"
    return [
        {"id": "buy-1", "task": buy, "fields": {"payee": PRIVATE["payee"], "customer": PRIVATE["customer"]},
         "turns": [{"role": "user", "content": buy}, {"role": "assistant", "content": CART},
                   {"role": "tool", "content": "ok cart.add sku=eggs qty=3 total=96"},
                   {"role": "assistant", "content": pay}], "calls": [CART, pay]},
        {"task": bill, "fields": {"account": PRIVATE["account"]},
         "turns": [{"role": "user", "content": bill}, {"role": "assistant", "content": timer}], "calls": [timer]},
    ]


def task_lines() -> list[dict[str, object]]:
    """Tasks of the loop run, half of them naming a private value (so the agent's own attempts,
    their replayed context and the examples in state.json hold them before redaction)."""
    out = []
    for i, (split, sku) in enumerate([("train", s) for s in ("eggs", "milk", "rice", "tea")]
                                     + [("heldout", s) for s in ("oats", "soap", "honey", "apples", "bread", "onions")]):
        who = (f" for {PRIVATE['customer']}", f", billed to {PRIVATE['account']}", " for zoltan", "")[i % 4]
        out.append({"id": f"t{i}", "text": f"Add {i + 2} {sku} to the cart{who}.", "family": "cart.add",
                    "expected": [f"<<qx cart.add; sku={sku}; qty={i + 2}>>"], "split": split})
    return out


def forms(value: str) -> set[bytes]:
    """The byte strings a value can be written as: UTF-8 in any case, and JSON's \\u escapes."""
    out = set()
    for v in (value, value.lower(), value.upper(), value.casefold()):
        out |= {v.encode("utf-8"), json.dumps(v)[1:-1].encode("ascii"), json.dumps(v, ensure_ascii=False)[1:-1].encode("utf-8")}
    return out


def scan(root: Path, skip: set[Path]) -> dict[str, list[str]]:
    """Every file under ``root`` (but ``skip``) read as bytes: which holds which private value."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p not in skip):
        data = path.read_bytes()
        for name, value in PRIVATE.items():
            if any(form in data for form in forms(value)):
                found.setdefault(str(path.relative_to(root)), []).append(name)
    return found


def test_no_private_value_reaches_any_file_written(tiny_cfg, tmp_path, capsys):
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in demo_lines()), encoding="utf-8")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in task_lines()), encoding="utf-8")
    inputs = {demos, tasks, tmp_path / "rehearsal.jsonl"}
    private = sorted(PRIVATE)

    # the store, with a reader kept open so the writer's WAL stays on disk to be scanned
    db = tmp_path / "out" / "ep.db"
    db.parent.mkdir()
    EpisodeStore(db).close()
    reader = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    reader.execute("SELECT COUNT(*) FROM episodes").fetchone()
    assert main(["store", "import", str(db), str(demos), "--private", *private]) == 0
    assert (tmp_path / "out" / "ep.db-wal").stat().st_size > 0
    assert main(["store", "inspect", "--json", "--verify", str(db)]) == 0
    (tmp_path / "out" / "inspect.txt").write_text(capsys.readouterr().out, encoding="utf-8")
    with EpisodeStore(db, readonly=True) as store:
        rows = training_rows(store)
        stored = len(store)
    (tmp_path / "out" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert scan(tmp_path / "out", inputs) == {}
    assert stored == 2 and len(rows) == 1  # the chain's call lost its payee: kept, not trained on
    assert "<private:account>" in rows[0]["prompt"]

    # the loop: seeded from the same file, acting on tasks that name the private values
    cfg = LoopConfig.from_dict(tiny_cfg(generations=1, demos=0, tasks=str(tasks), demos_file=str(demos),
                                        private_fields=private, library=str(tmp_path / "runs" / "library"),
                                        # every level of experience is written and shown: reflections, workflows
                                        reflect=True, replay_workflows=True,
                                        retrieve=["episodes", "insights", "workflows"]))
    lines: list[str] = []
    state = run_loop(cfg, tmp_path / "runs" / "run", log=lines.append)
    assert state.finished == 1 and any("2 from" in line for line in lines)
    report = write_report(tmp_path / "runs")
    reader.close()
    assert scan(tmp_path, inputs) == {}
    with EpisodeStore(tmp_path / "runs" / "run" / "store.db", readonly=True) as store:
        texts = [r.episode.task.text for r in store.episodes(source="agent")]
        assert any("<private:customer>" in t for t in texts) and any("<private:payee>" in t for t in texts)
        contexts = [m["content"] for r in store.episodes(source="agent") for m in r.episode.context]
        assert any("<private:" in c for c in contexts)  # the replayed demonstration, redacted
        assert store.insights(outcome="failure")  # the reflections were written, and scanned above
    assert "<private:" in (tmp_path / "runs" / "run" / "state.json").read_text() and report.is_file()
    assert list((tmp_path / "runs" / "library").rglob("*.json"))


def test_the_scan_finds_a_value_in_any_form(tmp_path):
    for i, text in enumerate([b"x Zoltan y", b"@zoltan", b"z\\u00fcrich-h\\u00f6fe", "ZÜRICH-HÖFE".encode()]):
        (tmp_path / f"f{i}").write_bytes(text)
    assert scan(tmp_path, set()) == {"f0": ["payee"], "f1": ["payee"], "f2": ["customer"], "f3": ["customer"]}


def test_private_fields_are_config_keys_checked_before_any_work(tiny_cfg, tmp_path):
    with pytest.raises(ConfigError, match=r"\[loop\] private_fields = \['payee'\] names fields .* demos_file, which is not set"):
        LoopConfig.from_dict({"loop": {"private_fields": ["payee"]}})
    with pytest.raises(ConfigError, match=r"\[loop\] private_fields: 'Payee' is not a field name"):
        LoopConfig.from_dict({"loop": {"demos_file": "d.jsonl", "private_fields": ["Payee"]}})
    assert "private_fields = []  # fields of the demos_file lines" in LoopConfig().to_toml()
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in demo_lines()), encoding="utf-8")
    out = tmp_path / "run"
    cfg = LoopConfig.from_dict(tiny_cfg(generations=1, demos_file=str(demos), private_fields=["payee", "iban"]))
    with pytest.raises(DemoFileError, match=r"demos.jsonl: private field 'iban' is not a field of the file"):
        run_loop(cfg, out, log=lambda m: None)
    assert not (out / "store.db").exists()  # refused before the store opens and the model loads
