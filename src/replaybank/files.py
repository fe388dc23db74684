"""Opening a file a user or a saved folder names: regular files only.

A FIFO blocks its reader until someone writes to it (forever, in practice), a device never ends
(``/dev/zero``) or reads the machine's state, a socket or a folder fails with an ``OSError``. So
every reader of a named file opens it through :func:`open_regular`: the open itself cannot block
(``O_NONBLOCK``: a FIFO opens at once), the descriptor is checked with ``fstat`` (so the check is
of the very file read, not of whatever was at the path a moment before), and only a regular file
is handed back, blocking again. A symbolic link the user named is followed (it was their choice);
``follow_links=False`` refuses one (for files inside a folder the project wrote, where a link
would lead outside it). A path with a NUL byte (which no file system accepts) is refused with the
same error type, never the ``ValueError`` the OS layer raises. Writers go through
:func:`write_regular`, which refuses a path that exists and is not a regular file (writing to a
FIFO blocks until someone reads it). Stdlib only.

Example:
    >>> import os, tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> os.mkfifo(d / "pipe")
    >>> read_regular(d / "pipe")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    replaybank.errors.ReplayBankError: .../pipe: is a FIFO (named pipe), not a regular file; name a file
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from replaybank.errors import ReplayBankError

__all__ = [
    "check_path",
    "check_regular",
    "check_writable",
    "file_kind",
    "fsync_dir",
    "open_regular",
    "read_regular",
    "write_regular",
]

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISREG, "a regular file"),  # where a folder is expected
)


def file_kind(mode: int) -> str:
    """What an ``st_mode`` is, in words (``'a FIFO (named pipe)'``; ``'a regular file'`` where a
    folder was expected)."""
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def _refusal(path: Path, mode: int, error: type[ReplayBankError], what: str) -> ReplayBankError:
    return error(f"{path}: is {file_kind(mode)}, not a regular file; name a {what}")


def check_path(
    path: str | os.PathLike[str], *, error: type[ReplayBankError] = ReplayBankError, what: str = "file"
) -> Path:
    """``Path(path)`` once it is known to hold no NUL byte (the OS layer would raise a bare
    ``ValueError``); ``what`` names the argument in the error."""
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        raise error(
            f"{what} = {path!r}: expected a path (a str or os.PathLike), got {type(path).__name__}"
        ) from None
    if "\x00" in text:
        raise error(f"{what} = {text!r}: the path holds a NUL byte (\\x00); name a path without one")
    return Path(text)


def open_regular(
    path: str | os.PathLike[str], *, error: type[ReplayBankError] = ReplayBankError, follow_links: bool = True,
    what: str = "file",
) -> BinaryIO:
    """``path`` opened for binary reading, once it is known to be a regular file.

    ``what`` names the file in the errors (``config file`` gives ``x.toml: config file not found``).

    Raises:
        error: the file is missing or unreadable (``file not found``, ``cannot read``), or it is a
            FIFO, device, socket or folder (or, with ``follow_links=False``, a symbolic link).
    """
    p = check_path(path, error=error, what=what)
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise error(f"{p}: {what} not found") from None
    except OSError as exc:  # O_NOFOLLOW's ELOOP on a link, ENXIO on a socket, EACCES, ...
        try:
            mode = (os.stat if follow_links else os.lstat)(p).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise _refusal(p, mode, error, what) from None
        raise error(f"{p}: cannot read ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refusal(p, mode, error, what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(
    path: str | os.PathLike[str], *, error: type[ReplayBankError] = ReplayBankError, follow_links: bool = True,
    what: str = "file", max_bytes: int | None = None,
) -> bytes:
    """The bytes of ``path``, a regular file (see :func:`open_regular`, which raises the same).

    ``max_bytes`` bounds what is read: a larger file is refused after reading one byte more than
    the bound, so a file that grows while it is read cannot exhaust memory either.
    """
    with open_regular(path, error=error, follow_links=follow_links, what=what) as f:
        try:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"{path}: cannot read ({exc.strerror or exc})") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise error(f"{path}: {what} is larger than {max_bytes} bytes; refused")
    return data


def check_regular(
    path: str | os.PathLike[str], *, error: type[ReplayBankError] = ReplayBankError, what: str = "file"
) -> Path:
    """``path`` itself when it is (a link to) a regular file, for readers that take a path and open it
    themselves (pyarrow, ``datasets``); the error is :func:`open_regular`'s."""
    open_regular(path, error=error, what=what).close()
    return Path(path)


def check_writable(
    path: str | os.PathLike[str], *, error: type[ReplayBankError] = ReplayBankError, what: str = "file",
    follow_links: bool = True,
) -> Path:
    """``path`` when a file may be written there: it holds no NUL byte, and it is missing or (a
    link to) a regular file (with ``follow_links=False``, not a link at all). Call it before long
    work whose result goes to ``path``, so a bad path fails at once; :func:`write_regular` checks
    again when it writes."""
    p = check_path(path, error=error, what=what)
    try:
        mode = (os.stat if follow_links else os.lstat)(p).st_mode
    except FileNotFoundError:
        return p
    except OSError as exc:
        raise error(f"{p}: cannot write the {what} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise _refusal(p, mode, error, what)
    return p


def write_regular(
    path: str | os.PathLike[str], data: bytes | str, *, error: type[ReplayBankError] = ReplayBankError,
    what: str = "file", follow_links: bool = True,
) -> Path:
    """Write ``data`` (a ``str`` as UTF-8) to ``path``, created or replaced, only when it is (or
    will be) a regular file: opened without blocking (a FIFO with no reader fails at once, one with
    a reader is refused), checked with ``fstat`` before it is truncated. ``follow_links=False``
    refuses a symbolic link at ``path`` (opened ``O_NOFOLLOW``): for a file inside a folder the
    project writes, where a link would send the write outside it.

    Raises:
        error: the path holds a NUL byte, is a FIFO, device, socket or folder (or, with
            ``follow_links=False``, a symbolic link), or cannot be written.
    """
    p = check_writable(path, error=error, what=what, follow_links=follow_links)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(p, flags, 0o666)
    except OSError as exc:  # ENXIO: a FIFO with no reader; EISDIR; EACCES; ELOOP: a link (O_NOFOLLOW)
        try:
            mode = (os.stat if follow_links else os.lstat)(p).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise _refusal(p, mode, error, what) from None
        raise error(f"{p}: cannot write the {what} ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refusal(p, mode, error, what)
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        with os.fdopen(os.dup(fd), "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
    except OSError as exc:
        raise error(f"{p}: cannot write the {what} ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    return p


def fsync_dir(folder: Path) -> None:
    """Flush ``folder``'s entries (a rename or a new file in it) to disk, as a file's ``fsync`` does its bytes."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
