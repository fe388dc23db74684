"""Which sections of README.md and docs/*.md state measured figures, and whether each cites the file
that backs them.

A heuristic over lines, outside fenced code blocks: a line states a measured figure when it holds a
number with a unit of measure (``%``, ``x`` / ``×``, ``s``, ``ms``, ``µs``, ``ns``, ``min``, ``h``,
``MB`` / ``GB`` / ``GiB``, ``per second``, ``/s``) or a ``±``. A section is the text under one heading
up to the next heading of any level; it cites a source when it links to, or names in backticks or
plainly, a path under ``benchmarks/results/`` or a ``.json`` file in the repository (a bare
``NAME.json`` counts when ``benchmarks/results/NAME.json`` exists, as the docs often name a result by
its file name alone; a ``.json`` name found nowhere is a file some command writes, not a source). A
cited path exists when it resolves from the repository root or from the document's folder. Only
a section's own text counts: a heading whose text cites a source does not cover the sections
under it (a document's title section citing one file would otherwise cover the whole document).
Such a section is counted as citing nothing; ``parent_cites`` records that an enclosing heading
cites a source, so the row reads "NO (a parent cites)" and says where to look. A section that
says plainly that no file backs a figure ("not kept in a file", "no file keeps ...") or that it is
an estimate ("estimate on paper", "Estimates, not measured") is flagged ``says_unbacked``: the
flag is per section, so a section holding one marked figure and one unmarked is flagged too.

Run ``python benchmarks/doc_figures.py``: prints one row per section with figures (document,
heading, figure lines, figures, cited, cited paths that exist) and writes
``benchmarks/results/doc_figures.json``. It reads nothing but the markdown and the file tree, so it
takes well under a second. It is a report, not a proof: a section that cites a file is not checked
to agree with it, and a figure that is a setting ("batch 256", "10% of the rows") counts as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

#: a number followed by a unit of measure, or a number with a spread (``0.40 ± 0.04``)
FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?"
    r"(?:%|×|x\b|ms\b|µs\b|us\b|ns\b|s\b|min\b|h\b|MB\b|GB\b|GiB\b|KB\b|tokens/s\b|/s\b|"
    r"per second\b|±\s?\d)"
)
#: a path under benchmarks/results/ (with or without a leading ../), or any NAME.json
RESULT_PATH = re.compile(r"(?:\.\./)*benchmarks/results/[A-Za-z0-9_./-]*[A-Za-z0-9_/-]")
JSON_PATH = re.compile(r"(?<![\w/.-])(?:\.\./)?[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.json\b")
#: a plain statement that no file backs a figure, or that a figure is an estimate
UNBACKED = re.compile(
    r"not kept in (?:a file|the repository)|no file (?:in the repository )?(?:keeps|backs)|"
    r"estimates?, not measured|estimates? on paper|\(on paper\)",
    re.IGNORECASE,
)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Section:
    """One heading's text in one document: its figures and the sources it cites."""

    doc: str
    heading: str
    line: int
    figure_lines: int
    figures: int
    cited: tuple[str, ...]
    missing: tuple[str, ...]
    #: whether an enclosing section (a heading of a higher level above this one) cites a source;
    #: information only, it does not count as a citation of this section's figures
    parent_cites: bool = False
    #: whether the section says that no file backs a figure, or that a figure is an estimate
    says_unbacked: bool = False

    @property
    def cites_source(self) -> bool:
        return bool(self.cited)

    @property
    def sources_exist(self) -> bool:
        return bool(self.cited) and not self.missing


def documents(root: Path = ROOT) -> list[Path]:
    """README.md, then docs/*.md in name order."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _resolve(path: str, doc: Path, root: Path) -> Path | None:
    """The file or folder a cited path names, from the document's folder or the root; else None."""
    bare = path.lstrip("./") if path.startswith("../") else path
    for candidate in (doc.parent / path, root / bare, root / path):
        if candidate.exists():
            return candidate
    if "/" not in path and path.endswith(".json") and (root / "benchmarks" / "results" / path).exists():
        return root / "benchmarks" / "results" / path
    return None


def cited_paths(line: str) -> list[str]:
    """Every benchmarks/results/ path and .json name a line mentions, in order, without repeats."""
    found = [m.group(0) for m in RESULT_PATH.finditer(line)]
    for match in JSON_PATH.finditer(line):
        name = match.group(0)
        # a link's text naming the file its target already gives ([x.json](../benchmarks/results/x.json))
        if "benchmarks/results/" not in name and not any(p.endswith("/" + name) for p in found):
            found.append(name)
    return list(dict.fromkeys(found))


def _is_source(path: str) -> bool:
    """Whether a cited path names a result: under benchmarks/results/, or a .json file by name."""
    return "benchmarks/results/" in path or path.endswith(".json")


def scan(doc: Path, root: Path = ROOT) -> list[Section]:
    """Every section of one markdown document, with its figures and cited sources."""
    name = doc.relative_to(root).as_posix()
    sections: list[Section] = []
    heading, start, level = "(top)", 1, 0
    ancestors: list[tuple[int, bool]] = []  # (level, cites a source) of the enclosing headings
    fig_lines = figs = 0
    cited: list[str] = []
    text: list[str] = []
    fenced = False

    def close() -> None:
        sources = [p for p in dict.fromkeys(cited) if _is_source(p)]
        resolved = {p: _resolve(p, doc, root) for p in sources}
        # a NAME.json that is nowhere in the repo is a file a command writes, not a citation
        sources = [p for p in sources if resolved[p] is not None or "benchmarks/results/" in p]
        missing = tuple(p for p in sources if resolved[p] is None)
        parent = any(c for _, c in ancestors)
        ancestors.append((level, bool(sources)))
        unbacked = bool(UNBACKED.search(" ".join(" ".join(text).split()) + " " + heading))
        if figs or sources:
            sections.append(Section(name, heading, start, fig_lines, figs, tuple(sources), missing, parent,
                                    unbacked))

    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        match = HEADING.match(line)
        if match:
            close()
            heading, start, fig_lines, figs, cited, text = match.group(2), number, 0, 0, [], []
            level = len(match.group(1))
            while ancestors and ancestors[-1][0] >= level:
                ancestors.pop()
            continue
        count = len(FIGURE.findall(line))
        if count:
            fig_lines += 1
            figs += count
        cited += cited_paths(line)
        text.append(line)
    close()
    return sections


def result_citations(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(document, line, path) for every benchmarks/results/ path README.md and docs/*.md cite,
    code blocks included (a command shown there names a file a reader will look for)."""
    out = []
    for doc in documents(root):
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            for match in RESULT_PATH.finditer(line):
                out.append((doc.relative_to(root).as_posix(), number, match.group(0)))
    return out


def missing_result_citations(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """The citations of ``result_citations`` whose path is not in the repository."""
    return [
        (name, number, path)
        for name, number, path in result_citations(root)
        if _resolve(path, root / name, root) is None
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "doc_figures.json", help="JSON to write")
    parser.add_argument("--all", action="store_true", help="list sections without figures too")
    args = parser.parse_args(argv)

    sections = [s for doc in documents() for s in scan(doc)]
    shown = sections if args.all else [s for s in sections if s.figures]
    print("| doc | section | line | figure lines | figures | source cited | sources exist | says unbacked |")
    print("|---|---|---|---|---|---|---|---|")
    for s in shown:
        exist = "yes" if s.sources_exist else ("no: " + ", ".join(s.missing) if s.missing else "-")
        cites = "yes" if s.cites_source else ("NO (a parent cites)" if s.parent_cites else "NO")
        print(f"| {s.doc} | {s.heading[:60]} | {s.line} | {s.figure_lines} | {s.figures} "
              f"| {cites} | {exist} | {'yes' if s.says_unbacked else '-'} |")
    with_figures = [s for s in sections if s.figures]
    summary = {
        "sections_with_figures": len(with_figures),
        "cite_a_source": sum(s.cites_source for s in with_figures),
        "cite_none": sum(not s.cites_source for s in with_figures),
        "cite_none_but_a_parent_does": sum(not s.cites_source and s.parent_cites for s in with_figures),
        "cite_none_but_say_unbacked": sum(not s.cites_source and s.says_unbacked for s in with_figures),
        "say_unbacked": sum(s.says_unbacked for s in with_figures),
        "cite_a_missing_path": sum(bool(s.missing) for s in sections),
    }
    print("\n" + ", ".join(f"{k}: {v}" for k, v in summary.items()))
    records = [dict(dataclasses.asdict(s), cites_source=s.cites_source, sources_exist=s.sources_exist)
               for s in shown]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "python benchmarks/doc_figures.py", "summary": summary,
                                    "sections": records}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 1 if summary["cite_a_missing_path"] else 0


if __name__ == "__main__":
    sys.exit(main())
