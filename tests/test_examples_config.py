"""Every ``examples/*.toml`` parses through the loader of the command it is written for.

Each example names its command in a comment (``# replaybank run examples/x.toml``). The test runs
that command's own config check through the ``replaybank`` entry point, as a user would:
``replaybank config --schema-only FILE`` for ``run`` and ``probe`` (keys and values; the files and
models a config names are checked by ``replaybank config`` on the machine that runs it), and
``replaybank loop --print-config FILE`` for the loop. A failure names the file and the loader's
message, which names the key.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# The one import: the `replaybank` command, whose `config` and `loop` subcommands call the loaders
# (today replaybank.llm.config.Config.from_toml and replaybank.llm.config.loop.LoopConfig.from_toml).
from replaybank.cli import main as replaybank

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CHECK = {  # the command an example is written for -> the argv that loads and validates its config
    "run": ["config", "--schema-only"],
    "probe": ["config", "--schema-only"],
    "loop": ["loop", "--print-config"],
}
COMMAND = re.compile(r"^#\s*replaybank (\w+) (\S+\.toml)\b", re.MULTILINE)


def test_there_are_examples_to_check() -> None:
    assert sorted(EXAMPLES.glob("*.toml")), f"no examples/*.toml under {EXAMPLES}"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_example_config_parses(path: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    found = COMMAND.search(path.read_text(encoding="utf-8"))
    assert found, (f"{path.name}: no comment '# replaybank <command> examples/{path.name}' saying which "
                   f"command reads it (one of {', '.join(CHECK)})")
    command, named = found.groups()
    assert command in CHECK, f"{path.name}: written for 'replaybank {command}', which reads no TOML config"
    assert Path(named).name == path.name, f"{path.name}: its comment runs {named}, another file"
    rc = replaybank([*CHECK[command], str(path)])
    printed, err = capsys.readouterr()
    assert rc == 0, f"examples/{path.name} (for replaybank {command}) does not load: {err.strip()}"
    # the effective config it prints (defaults included) is itself a config that loads to the same
    # thing; its first line says which file it came from
    again = tmp_path / path.name
    again.write_text(printed, encoding="utf-8")
    assert replaybank([*CHECK[command], str(again)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.splitlines()[1:] == printed.splitlines()[1:]
