from __future__ import annotations

import dataclasses
import json

from replaybank.cli import main
from replaybank.episodic import (
    SCHEMA_VERSION,
    Episode,
    EpisodeStore,
    Step,
    Task,
    Verdict,
    demonstration,
)
from replaybank.episodic.env import QxEnvironment
from replaybank.episodic.experience import Insight
from replaybank.episodic.turns import demonstrate
from replaybank.episodic.workflow import abstract


def test_store_inspect_prints_generations_families_and_schema(tmp_path, capsys):
    db = tmp_path / "ep.db"
    with EpisodeStore(db) as s:
        s.add(demonstration(Task("d", "Add 3 eggs.", "cart.add"), ["<<qx cart.add; sku=eggs; qty=3>>"]))
        for g, ok in ((1, False), (1, True), (2, True), (2, True)):
            t = Task(f"t{g}", "Send $5 to Anna.", "purse.send")
            out = "<<qx purse.send; to=@anna; cents=500>>" if ok else "no"
            s.add(Episode(t, (Step(t.text, out),), Verdict(ok, float(ok)), generation=g))
        done = demonstrate(QxEnvironment(), Task("r", "Add 3 eggs.", "cart.add", 1, ("<<qx cart.add; sku=eggs; qty=3>>",)))
        replay = dataclasses.replace(done, generation=2, source="replayed")
        rid = s.add(replay)
        s.add_insight(Insight("Cents", "money is in cents", "Write $5 as cents=500.", "failure", episodes=(rid,)))
        s.add_workflow(abstract(replay, rid))
    assert main(["store", "inspect", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"schema version {SCHEMA_VERSION}" in out
    assert "5 episodes (4 successful, 1 demonstrations, 1 replayed) from 6 attempts" in out
    assert "experiences: 1 workflows, 1 insights from failures, 0 from successes" in out
    assert "         1         2         2    50.0%   0.500" in out
    assert "         2         3         2   100.0%   1.000" in out
    assert "cart.add 2 (100%), purse.send 4 (75%)" in out
    assert main(["store", "inspect", "--json", "--verify", str(db)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [g["attempts"] for g in summary["generations"]] == [1, 2, 3]
    assert summary["experiences"] == {"insights": {"success": 0, "failure": 1}, "workflows": 1}
    assert summary["bytes"] > 0


def test_store_inspect_of_bad_files_is_a_clear_error(tmp_path, capsys):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"PK\x03\x04 definitely a zip")
    assert main(["store", "inspect", str(junk)]) == 2
    assert "junk.db: not an SQLite database" in capsys.readouterr().err
    assert main(["store", "inspect", str(tmp_path / "none.db")]) == 2
    assert "none.db: no such episodic store" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
