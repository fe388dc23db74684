"""Regular files only: the shared readers refuse a FIFO, a device, a socket or a folder at
once, with a ReplayBankError naming the file (a FIFO once blocked the JSONL reader forever)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from replaybank.errors import ReplayBankError
from replaybank.files import check_regular, open_regular, read_regular
from replaybank.jsonl import JsonlError, iter_jsonl, read_utf8


def _make(kind: str, path: Path) -> Path:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/zero")  # a link the caller named is followed, then refused
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    return path


KINDS = {"fifo": r"a FIFO \(named pipe\)", "folder": "a folder", "device": "a character device", "socket": "a socket"}


@pytest.mark.parametrize("kind", list(KINDS))
def test_read_regular_refuses_what_is_not_a_regular_file(tmp_path, alarm, kind):
    path = _make(kind, tmp_path / "x.jsonl")
    for call in (read_regular, check_regular, lambda p, **k: open_regular(p, **k).close()):
        with pytest.raises(ReplayBankError, match=rf"x.jsonl: is {KINDS[kind]}, not a regular file"):
            call(path)
    with pytest.raises(JsonlError, match=rf"x.jsonl: is {KINDS[kind]}"):
        read_utf8(path)
    with pytest.raises(JsonlError, match=rf"x.jsonl: is {KINDS[kind]}"):
        list(iter_jsonl(path))


def test_links_followed_or_refused_as_asked(tmp_path):
    target = tmp_path / "t.jsonl"
    target.write_text('{"a": 1}\n')
    (tmp_path / "l.jsonl").symlink_to(target)
    assert read_regular(tmp_path / "l.jsonl") == b'{"a": 1}\n'
    with pytest.raises(ReplayBankError, match=r"l.jsonl: is a symbolic link, not a regular file"):
        read_regular(tmp_path / "l.jsonl", follow_links=False)
    with pytest.raises(ReplayBankError, match=r"nope.toml: config file not found"):
        read_regular(tmp_path / "nope.toml", what="config file")
    assert list(iter_jsonl(tmp_path / "l.jsonl")) == [(1, {"a": 1})]


def test_a_nul_byte_in_a_path_is_named_not_a_bare_value_error(tmp_path):
    from replaybank.files import check_path, check_writable, write_regular

    bad = str(tmp_path / "a\0b.json")
    for call in (read_regular, check_regular, open_regular, check_path, check_writable,
                 lambda p, **k: write_regular(p, b"x", **k)):  # fmt: skip
        with pytest.raises(ReplayBankError, match=r"config file = '.*a\\x00b.json': the path holds a NUL byte"):
            call(bad, what="config file")
    with pytest.raises(ReplayBankError, match="expected a path"):
        check_path(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", list(KINDS))
def test_write_regular_refuses_what_is_not_a_regular_file(tmp_path, alarm, kind):
    from replaybank.files import check_writable, write_regular

    path = _make(kind, tmp_path / "out.json")
    for call in (check_writable, lambda p: write_regular(p, "{}")):
        with pytest.raises(ReplayBankError, match=rf"out.json: is {KINDS[kind]}, not a regular file"):
            call(path)
    (tmp_path / "new.json").write_text("a much longer old text")
    write_regular(tmp_path / "new.json", "{}")
    assert (tmp_path / "new.json").read_text() == "{}"
    write_regular(tmp_path / "fresh.json", b"1")
    assert (tmp_path / "fresh.json").read_bytes() == b"1"


def test_write_regular_without_following_links_refuses_a_link_and_leaves_its_target(tmp_path):
    from replaybank.files import check_writable, write_regular

    target = tmp_path / "target.txt"
    target.write_text("kept")
    os.symlink(target, tmp_path / "link.txt")
    for call in (lambda: write_regular(tmp_path / "link.txt", "new", follow_links=False, what="state file"),
                 lambda: check_writable(tmp_path / "link.txt", follow_links=False, what="state file")):
        with pytest.raises(ReplayBankError, match=r"link.txt: is a symbolic link, not a regular file; name a state file"):
            call()
    assert target.read_text() == "kept"
    write_regular(tmp_path / "link.txt", "new")  # followed by default: a link the user named
    assert target.read_text() == "new"
