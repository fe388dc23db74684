"""``.npy`` files for saves: written with their sha256 computed on the way out, read only after the
file's place, size, checksum and header have been checked.

The reader never lets numpy interpret bytes it has not checked: the header is parsed on its own,
its dtype must be a plain one (no object, void or structured), its shape must account for exactly
the bytes in the file, and the sha256 must match before an array is built. Paths must stay inside
the save folder: no absolute paths, no ``..``, no symbolic links anywhere below the folder.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .errors import CorruptSaveError

CHUNK = 1 << 24  # bytes per write / hash step
ARRAY_KINDS = "biufcSU"  # bool, integers, floats, complex, fixed-width bytes and str


def _raw(arr: np.ndarray) -> memoryview:
    """The bytes of an array in C order, without a copy when it is contiguous (empty ones too)."""
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data


def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    fp = io.BytesIO()
    d = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    try:
        np.lib.format.write_array_header_1_0(fp, d)
    except ValueError:  # header longer than 64 KiB
        np.lib.format.write_array_header_2_0(fp, d)
    return fp.getvalue()


def write(
    path: Path, arr: np.ndarray, *, rows: int | None = None, holes: np.ndarray | None = None
) -> tuple[str, int]:
    """Write ``arr`` as ``.npy`` to ``path`` (fsynced) and return ``(sha256, bytes)``.

    ``rows`` pads the first axis with zero rows up to that length (the tail is left sparse on
    disk); rows listed in ``holes`` are written as zeros. ``arr`` may be a live view: it is read
    chunk by chunk, and each chunk is copied before holes are cleared.
    """
    n = len(arr) if arr.ndim else 1  # a 0-d array is written as its one element
    total = n if rows is None or arr.ndim == 0 else rows
    shape = arr.shape if arr.ndim == 0 else (total, *arr.shape[1:])
    row_bytes = arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    header = _header(arr.dtype, shape)
    digest = hashlib.sha256(header)
    step = max(1, CHUNK // max(row_bytes, 1))
    # hashing runs in a helper thread while the main thread writes (both release the GIL)
    with open(path, "wb") as f, ThreadPoolExecutor(1) as hasher:
        f.write(header)
        pending: Future[None] | None = None
        for start in range(0, n, step):
            chunk = arr[start : start + step] if arr.ndim else arr
            if holes is not None and len(holes):
                inside = holes[(holes >= start) & (holes < start + len(chunk))]
                if len(inside):
                    chunk = np.array(chunk)
                    chunk[inside - start] = 0
            data = _raw(chunk)
            if pending is not None:
                pending.result()
            pending = hasher.submit(digest.update, data)
            f.write(data)
        if pending is not None:
            pending.result()
        pad = (total - n) * row_bytes
        zeros = bytes(min(pad, CHUNK))
        for done in range(0, pad, CHUNK):
            digest.update(zeros[: min(CHUNK, pad - done)])
        if pad:
            f.truncate(len(header) + total * row_bytes)
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest(), len(header) + total * row_bytes


def inside(root: Path, rel: str, where: str, *, folder: bool = False) -> Path:
    """``root / rel`` after checking that it stays inside ``root``: ``rel`` (with ``/``) has no
    absolute part or ``..``, every part below ``root`` is a plain folder (no symbolic link), and
    the last is a regular file (``folder=False``; never a pipe or device) or a plain folder."""
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") or "\\" in p for p in parts):
        raise CorruptSaveError(f"{where}: path {rel!r} leaves the save folder {root}")
    path = root
    for i, part in enumerate(parts):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            raise CorruptSaveError(f"{where}: {path} is missing (the save is incomplete)") from None
        except OSError as err:
            raise CorruptSaveError(f"{where}: {path} cannot be read ({err})") from None
        if stat.S_ISLNK(mode):
            raise CorruptSaveError(
                f"{where}: {path} is a symbolic link; a save holds only plain files and folders"
            )
        want_folder = folder or i < len(parts) - 1
        if not (stat.S_ISDIR(mode) if want_folder else stat.S_ISREG(mode)):
            kind = "folder" if want_folder else "regular file"
            raise CorruptSaveError(f"{where}: {path} is not a {kind}")
    if not path.resolve().is_relative_to(root.resolve()):
        raise CorruptSaveError(f"{where}: path {rel!r} leaves the save folder {root}")
    return path


def _parse_header(head: bytes, size: int, where: str) -> tuple[np.dtype, tuple[int, ...], int]:
    fp = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except Exception as err:  # untrusted bytes: whatever numpy's header parser raises
        raise CorruptSaveError(f"{where}: not a readable .npy file ({err!r})") from None
    if dtype.kind not in ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise CorruptSaveError(f"{where}: dtype {dtype} is refused (object, void and structured)")
    if fortran or not all(isinstance(d, int) and 0 <= d <= 2**48 for d in shape):
        raise CorruptSaveError(f"{where}: header shape {shape} / fortran_order {fortran} refused")
    offset = fp.tell()
    if offset + int(np.prod(shape, dtype=object)) * dtype.itemsize != size:
        raise CorruptSaveError(
            f"{where}: header says {shape} {dtype}, which does not fill the file's {size} bytes"
        )
    return dtype, tuple(shape), offset


def read(path: Path, where: str, sha256: str, nbytes: int, *, mmap: bool = False) -> np.ndarray:
    """The array in ``path`` after checking its size, sha256 and header (see the module doc).

    With ``mmap=True`` the file is mapped copy-on-write (it is hashed by streaming it first);
    otherwise it is read once into fresh, writable memory that the array owns.
    """
    size = os.lstat(path).st_size
    if size != nbytes:
        raise CorruptSaveError(
            f"{where}: {path} has {size} bytes, the manifest says {nbytes} (truncated?)"
        )
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        if mmap:
            head = f.read(min(size, 1 << 17))
            f.seek(0)
            block = memoryview(bytearray(min(size, 1 << 20)))
            while got := f.readinto(block):
                digest.update(block[:got])
        else:
            buf = np.empty(size, dtype=np.uint8)  # the array will own this memory
            if f.readinto(buf.data) != size:
                raise CorruptSaveError(f"{where}: {path} changed while it was read")
            digest.update(buf.data)
            head = buf[: 1 << 17].tobytes()
    if digest.hexdigest() != sha256:
        raise CorruptSaveError(
            f"{where}: {path} checksum mismatch, the file was altered or corrupted"
        )
    dtype, shape, offset = _parse_header(head, size, where)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype.kind == "b" and count:  # a bool byte other than 0 or 1 is not a value numpy holds
        data = np.memmap(path, np.uint8, mode="r", offset=offset) if mmap else buf[offset:]
        if data.max() > 1:
            raise CorruptSaveError(f"{where}: {path} holds bool bytes other than 0 and 1")
    try:
        if mmap and count:
            return np.memmap(path, dtype=dtype, mode="c", offset=offset, shape=shape)
        if mmap:
            return np.zeros(shape, dtype)
        return buf[offset:].view(dtype).reshape(shape)
    except (ValueError, OverflowError, MemoryError) as err:  # e.g. (2**48, 2**48, 0)
        raise CorruptSaveError(f"{where}: header shape {shape} cannot be built ({err})") from None
