"""Storage constructors, zeroed allocation, file names and the checks of ``restore``."""

import numpy as np
import pytest

from replaybank import ColumnarStorage, MemmapStorage, RaggedStorage, ReplayBankError
from replaybank.ragged import Ragged
from replaybank.spec import ColumnSpec
from replaybank.storage import file_stems


@pytest.mark.parametrize("bad", [None, 3, b"dir", ""])
def test_memmap_storage_needs_a_directory_path(bad):
    with pytest.raises(ReplayBankError, match="directory"):
        MemmapStorage(bad)


def test_memmap_storage_refuses_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ReplayBankError, match="not a directory"):
        MemmapStorage(tmp_path / "f")


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_check_memory_must_be_a_bool(bad):
    with pytest.raises(ReplayBankError, match="check_memory"):
        ColumnarStorage(check_memory=bad)


def test_columns_start_as_zeros():
    junk = np.full(1 << 14, 3.5)
    del junk
    s = ColumnarStorage()
    s.allocate(1 << 14, {"x": ColumnSpec((), np.dtype("f8"))})
    assert not s.column("x").any()


def test_file_stems_are_unique_and_plain():
    names = ["obs", "x.values", "x", "../up", "a b", "a_b", "é", "-", "col.0"]
    stems = file_stems(names)
    files = [f"{s}.npy" for s in stems.values()] + [
        f"{stems[n]}.{part}.npy" for n in names for part in ("values", "offsets")
    ]
    assert len(set(files)) == len(files)
    assert all("/" not in s and s not in (".", "..") for s in stems.values())
    assert stems["obs"] == "obs" and stems["a_b"] == "a_b"


def spec():
    return {"x": ColumnSpec((2,), np.dtype("f4")), "t": ColumnSpec((), np.dtype("i4"), ragged=True)}


def good(high=3, capacity=5):
    return {
        "x": np.zeros((capacity, 2), np.float32),
        "t": Ragged(np.arange(6, dtype=np.int32), np.array([0, 1, 3, 6])[: high + 1]),
    }


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda c: c.pop("t"), "columns.t"),
        (lambda c: c.__setitem__("y", np.zeros(5)), "columns.y"),
        (lambda c: c.__setitem__("x", np.zeros((5, 3), np.float32)), "columns['x']: shape"),
        (lambda c: c.__setitem__("x", np.zeros((5, 2), np.float64)), "columns['x']: dtype"),
        (lambda c: c.__setitem__("x", np.zeros((6, 2), np.float32)), "6 rows"),
        (lambda c: c.__setitem__("x", [[0, 0]] * 5), "expected an array"),
        (lambda c: c.__setitem__("t", np.arange(6)), "Ragged"),
        (lambda c: c.__setitem__("t", Ragged(np.arange(6), np.array([0, 1, 3, 6]))), "values"),
        (
            lambda c: c.__setitem__("t", Ragged(np.arange(6, dtype=np.int32), np.array([0, 3, 1, 6]))),
            "without decreasing",
        ),
        (
            lambda c: c.__setitem__("t", Ragged(np.arange(6, dtype=np.int32), np.array([0, 1, 3, 9]))),
            "from 0 to 6",
        ),
        (
            lambda c: c.__setitem__("t", Ragged(np.arange(6, dtype=np.int32), np.array([0, 6]))),
            "offsets: shape",
        ),
    ],
)
def test_restore_checks_before_changing_anything(change, words):
    s = RaggedStorage()
    s.restore(5, spec(), good(), 3)
    before = s.read(np.arange(3))
    columns = good()
    change(columns)
    with pytest.raises(ReplayBankError, match=words.replace("[", r"\[").replace("]", r"\]")):
        s.restore(5, spec(), columns, 3)
    after = s.read(np.arange(3))
    assert np.array_equal(before["x"], after["x"])
    assert [r.tolist() for r in after["t"]] == [[0], [1, 2], [3, 4, 5]]


def test_export_zeroes_holes_and_empties_ragged_holes():
    s = RaggedStorage()
    s.allocate(4, spec())
    s.write(np.arange(4), {"x": np.ones((4, 2), np.float32), "t": [np.arange(2, dtype=np.int32)] * 4})
    out = s.export(4, np.array([1, 2]))
    assert out["x"].tolist() == [[1, 1], [0, 0], [0, 0], [1, 1]]
    assert out["t"].lengths.tolist() == [2, 0, 0, 2]
    assert s.column("x")[1].tolist() == [1, 1]  # the live buffer is untouched
