"""Column specs read from saves (``ColumnSpec.from_json``) and given by users (``as_spec``)."""

import numpy as np
import pytest

from replaybank import RaggedStorage, ReplayBankError, ReplayBuffer
from replaybank.errors import InvalidTypeError
from replaybank.spec import ColumnSpec, as_spec


def test_from_json_round_trips():
    col = ColumnSpec((2, 3), np.dtype(">i2"), ragged=True)
    assert ColumnSpec.from_json(col.to_json()) == col


@pytest.mark.parametrize(
    "data, key",
    [
        ({"shape": [3], "dtype": "<f4"}, "spec.ragged"),
        ({"shape": [3], "dtype": "<f4", "ragged": False, "x": 1}, "spec.x"),
        ({"shape": [3], "dtype": "|O", "ragged": False}, "spec.dtype"),
        ({"shape": [3], "dtype": "V8", "ragged": False}, "spec.dtype"),
        ({"shape": [3], "dtype": "<M8[s]", "ragged": False}, "spec.dtype"),
        ({"shape": [3], "dtype": [["a", "<f4"]], "ragged": False}, "spec.dtype"),
        ({"shape": [3], "dtype": "(2,)<f4", "ragged": False}, "spec.dtype"),
        ({"shape": [3], "dtype": "not a dtype", "ragged": False}, "spec.dtype"),
        ({"shape": [3], "dtype": "S0", "ragged": False}, "spec.dtype"),
        ({"shape": [-1], "dtype": "<f4", "ragged": False}, "spec.shape"),
        ({"shape": [True], "dtype": "<f4", "ragged": False}, "spec.shape"),
        ({"shape": [2.0], "dtype": "<f4", "ragged": False}, "spec.shape"),
        ({"shape": 3, "dtype": "<f4", "ragged": False}, "spec.shape"),
        ({"shape": [2**30, 2**30], "dtype": "<f4", "ragged": False}, "spec.shape"),
        ({"shape": [3], "dtype": "<f4", "ragged": "no"}, "spec.ragged"),
        ([3, "<f4", False], "spec"),
    ],
)
def test_from_json_refuses_what_a_save_cannot_hold(data, key):
    with pytest.raises(ReplayBankError, match=key.replace(".", r"\.")):
        ColumnSpec.from_json(data)


@pytest.mark.parametrize(
    "raw, words",
    [
        ({"x": ((3,), object)}, "object"),
        ({"x": ((3,), [("a", "f4")])}, "structured"),
        ({"x": ((-3,), "f4")}, "shape"),
        ({"x": (3, "f4")}, "shape"),
        ({"x": ((3,), "f4", "yes")}, "ragged"),
        ({1: ((3,), "f4")}, "names must be strings"),
        ([("x", ((3,), "f4"))], "mapping"),
    ],
)
def test_as_spec_refuses_bad_user_specs(raw, words):
    with pytest.raises(ReplayBankError, match=words):
        ReplayBuffer(4, spec=raw)


def test_as_spec_accepts_column_specs_and_text():
    spec = as_spec({"a": ColumnSpec((2,), np.dtype("f4")), "b": ((), "U5"), "c": ([1, 2], "c8")})
    assert spec["b"].dtype == np.dtype("U5") and spec["c"].shape == (1, 2)


@pytest.mark.parametrize(
    "column, words",
    [
        (np.array(["2026-01-01"], dtype="datetime64[s]"), "dtype"),
        (np.array([1, 2], dtype="timedelta64[ms]"), "dtype"),
        (np.zeros((2,) + (1,) * 33), "shape"),  # numpy allows 64 dims, a save 32
    ],
)
def test_extend_infers_only_specs_a_save_can_hold(tmp_path, column, words):
    # the loader's rules (check_dtype/check_shape) apply to the first batch: extend used to store
    # a datetime column that save then refused
    buf = ReplayBuffer(8, seed=0)
    with pytest.raises(InvalidTypeError, match=f"column 't' {words}"):
        buf.extend({"t": column, "x": np.arange(len(column))})
    assert buf.spec is None and len(buf) == 0
    buf.extend({"x": np.arange(3)})  # the buffer is still usable
    buf.save(tmp_path / "b")
    assert len(ReplayBuffer.load(tmp_path / "b")) == 3


def test_ragged_rows_follow_the_same_dtype_rule():
    buf = ReplayBuffer(8, storage=RaggedStorage(), seed=0)
    rows = [np.array(["2026-01-01"] * k, dtype="datetime64[D]") for k in (1, 2)]
    with pytest.raises(InvalidTypeError, match="column 't' dtype"):
        buf.extend({"t": rows})
    assert buf.spec is None
