"""Which generations train: the lineage policies."""

from __future__ import annotations

import pytest

from replaybank.llm.train.lineage import select_lineage


def test_lineage_policies():
    assert select_lineage(0, 3, "window") == [0]
    assert select_lineage(5, 3, "window") == [3, 4, 5]
    assert select_lineage(2, 1, "window") == [2]
    assert select_lineage(3, 3, "all") == [0, 1, 2, 3]
    assert select_lineage(4, 3, "best", scores=[0.5, 0.1, 0.9, 0.2]) == [0, 2, 4]
    with pytest.raises(ValueError, match="needs a score"):
        select_lineage(2, 3, "best", scores=[1.0])
    with pytest.raises(ValueError, match="unknown lineage"):
        select_lineage(1, 3, "newest")  # type: ignore[arg-type]
