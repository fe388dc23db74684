"""Names a config or a saved file supplies, and the folders built from them.

An arm or recipe name becomes part of a path (``OUT.partial/adapters/<arm>/...``,
``OUT.partial/<arm>-seed0-gen0/checkpoint.pt``), so it must be a name, not a path: letters,
digits, ``-``, ``_`` and ``.``, starting with a letter, digit or ``_`` (so never ``.``, ``..`` or a
hidden file), at most :data:`MAX_NAME` characters. :func:`safe_folder` builds a folder under a
root the user named, refusing any part of it that is a symbolic link or not a folder, so nothing
written there can land outside the root.

Example:
    >>> check_name("self-distill", "recipe")
    'self-distill'
    >>> check_name("../../x", "recipe")
    Traceback (most recent call last):
    ...
    ValueError: recipe name '../../x' is not a name: use letters, digits, '-', '_' and '.' (starting with a letter, digit or '_'), no '/' or '..'
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from replaybank.errors import ReplayBankError

__all__ = ["MAX_NAME", "UnsafePathError", "check_name", "is_name", "refuse_links", "safe_folder", "write_inside"]

MAX_NAME = 100
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


class UnsafePathError(ReplayBankError):
    """A path built from a supplied name would leave its folder, or passes through a symbolic link."""


def is_name(name: object) -> bool:
    """Whether ``name`` is a string that :func:`check_name` accepts."""
    return isinstance(name, str) and len(name) <= MAX_NAME and _NAME.fullmatch(name) is not None


def check_name(name: object, what: str) -> str:
    """``name`` itself when it is a name (see the module doc).

    Raises:
        ValueError: anything else; the caller adds the file, line and key.
    """
    if not is_name(name):
        too_long = isinstance(name, str) and len(name) > MAX_NAME
        raise ValueError(
            f"{what} name {name!r} is not a name: "
            + (f"at most {MAX_NAME} characters" if too_long else
               "use letters, digits, '-', '_' and '.' (starting with a letter, digit or '_'), no '/' or '..'")
        )
    return str(name)


def safe_folder(root: Path, *parts: str) -> Path:
    """``root/part/...``, created, each part a checked name that is a real folder (not a link).

    ``root`` is the folder the user named (it may itself be a link: that was their choice); every
    part below it must be absent (then it is created) or a folder that is not a symbolic link.

    Raises:
        UnsafePathError: a part that is not a name, or one that exists as a link or not a folder.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> safe_folder(root, "adapters", "gen1").relative_to(root).as_posix()
        'adapters/gen1'
    """
    path = root
    for part in parts:
        try:
            check_name(part, "folder")
        except ValueError as exc:
            raise UnsafePathError(f"{root}: {exc}") from None
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            try:
                path.mkdir()
            except FileExistsError:  # made meanwhile: checked below like any other
                mode = os.lstat(path).st_mode
            else:
                continue
        if stat.S_ISLNK(mode):
            raise UnsafePathError(f"{path}: is a symbolic link; a run folder holds its own files (remove the link)")
        if not stat.S_ISDIR(mode):
            raise UnsafePathError(f"{path}: exists and is not a folder")
    return path


def refuse_links(folder: Path, *names: str) -> None:
    """Refuse files ``names`` in ``folder`` that are symbolic links, FIFOs, devices or folders
    (writing to one would go elsewhere, block, or fail); absent files are fine.

    Raises:
        UnsafePathError: naming the file.
    """
    for name in names:
        path = folder / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            raise UnsafePathError(f"{path}: is a symbolic link; a run folder holds its own files (remove the link)")
        if not stat.S_ISREG(mode):
            raise UnsafePathError(f"{path}: exists and is not a regular file")


def write_inside(folder: Path, name: str, data: bytes) -> Path:
    """Replace ``folder/name`` with ``data`` atomically, never writing through a link: ``name`` is a
    checked name, a link (or FIFO, device, folder) at it is refused, and the bytes go to a fresh
    temporary file (a leftover or a link at its name is removed, never followed) renamed into place.

    Raises:
        UnsafePathError: ``name`` is not a name, or something other than a regular file is at it.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> write_inside(folder, "report.md", b"# hi").read_text()
        '# hi'
    """
    try:
        check_name(name, "file")
    except ValueError as exc:
        raise UnsafePathError(f"{folder}: {exc}") from None
    refuse_links(folder, name)
    tmp = folder / f".{name}.tmp"
    tmp.unlink(missing_ok=True)
    with open(tmp, "xb") as f:  # O_EXCL: never through a link made meanwhile
        f.write(data)
    os.replace(tmp, folder / name)
    return folder / name
