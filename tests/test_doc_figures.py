"""benchmarks/doc_figures.py: every benchmarks/results/ path README.md and docs/*.md cite is in the
repository, and the scan finds figures, citations and missing paths in a document of its own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("doc_figures", ROOT / "benchmarks" / "doc_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_figures"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_every_cited_result_path_exists():
    doc_figures = _module()
    citations = doc_figures.result_citations(ROOT)
    assert len(citations) > 50, "the docs cite their results; the scan found almost none"
    missing = doc_figures.missing_result_citations(ROOT)
    assert not missing, "cited but not in the repository:\n" + "\n".join(
        f"{doc}:{line}: {path}" for doc, line, path in missing
    )


def test_scan_counts_figures_and_resolves_citations(tmp_path):
    doc_figures = _module()
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "speed.json").write_text("{}")
    (tmp_path / "README.md").write_text(
        "# Title\n\n## Speed\n\n4.98x at 10^6 items, 14.9 µs, 92.4 ± 1.8% (a figure and its spread: one): "
        "[speed.json](benchmarks/results/speed.json)\n\n"
        "## Gone\n\n3 s a step ([gone](benchmarks/results/gone.json))\n\n"
        "## Uncited\n\n```\n50% in a code block\n```\n85% of tasks\n"
        "## Parent\n\nevery number in `benchmarks/results/speed.json`\n\n### Child\n\n0.5 ± 0.1\n"
        "\n### Marked\n\n0.7 ± 0.1 (one run, not kept in a file)\n"
    )
    (tmp_path / "docs" / "a.md").write_text("# A\n\n12 ms: `../benchmarks/results/speed.json`\n")
    sections = {s.heading: s for doc in doc_figures.documents(tmp_path) for s in doc_figures.scan(doc, tmp_path)}
    assert sections["Speed"].figures == 3 and sections["Speed"].cited == ("benchmarks/results/speed.json",)
    assert sections["Speed"].sources_exist
    assert sections["Gone"].missing == ("benchmarks/results/gone.json",)
    assert sections["Uncited"].figures == 1 and not sections["Uncited"].cites_source
    assert sections["A"].sources_exist
    assert sections["Child"].parent_cites and not sections["Child"].cites_source
    assert not sections["Uncited"].parent_cites
    # a parent's citation is information only: the child's figures still count as citing nothing
    summary = [s for s in sections.values() if s.figures and not s.cites_source]
    assert sections["Child"] in summary and not sections["Child"].says_unbacked
    assert sections["Marked"].says_unbacked and not sections["Uncited"].says_unbacked
    missing = doc_figures.missing_result_citations(tmp_path)
    assert missing == [("README.md", 9, "benchmarks/results/gone.json")]
