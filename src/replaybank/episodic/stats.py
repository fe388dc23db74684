"""Store statistics: what ``replaybank store inspect`` prints and a loop report can reuse.

Rates are over *attempts* (every recorded try counts, duplicates included); ``episodes`` counts
distinct task + output pairs.

Example:
    >>> import tempfile, os
    >>> from replaybank.episodic import Episode, EpisodeStore, Step, Task, Verdict
    >>> store = EpisodeStore(os.path.join(tempfile.mkdtemp(), "ep.db"))
    >>> ok = Episode(Task("t", "2+2?", "sum"), (Step("2+2?", "4"),), Verdict(True, 1.0), generation=1)
    >>> bad = Episode(Task("t", "2+2?", "sum"), (Step("2+2?", "5"),), Verdict(False, 0.0), generation=1)
    >>> _ = store.add_many([ok, ok, bad])
    >>> s = summary(store)
    >>> s["episodes"], s["attempts"], s["generations"][0]
    (2, 3, {'generation': 1, 'attempts': 3, 'episodes': 2, 'successes': 2, 'success_rate': 0.667, 'mean_reward': 0.667})
    >>> store.close()
"""

from __future__ import annotations

from typing import Any

from .store import EpisodeStore


def summary(store: EpisodeStore) -> dict[str, Any]:
    """Counts per generation and per family, sizes and the schema version, as a JSON-safe dict."""
    read = store.query
    gens = [
        {
            "generation": int(g),
            "attempts": int(n),
            "episodes": int(d),
            "successes": int(s),
            "success_rate": round(s / n, 3),
            "mean_reward": round(float(r), 3),
        }
        for g, n, d, s, r in read(
            "SELECT a.generation, COUNT(*), COUNT(DISTINCT a.episode_id), SUM(e.success), AVG(e.reward)"
            " FROM attempts a JOIN episodes e ON e.id = a.episode_id GROUP BY a.generation ORDER BY 1"
        )
    ]
    families = [
        {"family": f, "attempts": int(n), "episodes": int(d), "success_rate": round(s / n, 3)}
        for f, n, d, s in read(
            "SELECT e.family, COUNT(*), COUNT(DISTINCT e.id), SUM(e.success)"
            " FROM attempts a JOIN episodes e ON e.id = a.episode_id GROUP BY e.family ORDER BY 1"
        )
    ]
    (episodes, successes, demos, replayed), = read(
        "SELECT COUNT(*), COALESCE(SUM(success), 0), COALESCE(SUM(source = 'demo'), 0),"
        " COALESCE(SUM(source = 'replayed'), 0) FROM episodes"
    )
    insights, workflows = {"success": 0, "failure": 0}, 0
    if store.schema_version >= 2:  # a version-1 file opened read-only has no experiences
        for level, outcome, n in read("SELECT level, outcome, COUNT(*) FROM experiences GROUP BY 1, 2"):
            if level == "workflow":
                workflows += int(n)
            elif level == "insight" and outcome in insights:
                insights[outcome] = int(n)
    files = [store.path, store.path.with_name(store.path.name + "-wal")]
    return {
        "path": str(store.path),
        "schema_version": store.schema_version,
        "bytes": sum(p.stat().st_size for p in files if p.exists()),
        "episodes": int(episodes),
        "successful_episodes": int(successes),
        "demonstrations": int(demos),
        "replayed_episodes": int(replayed),
        "experiences": {"insights": insights, "workflows": workflows},
        "attempts": store.attempt_count(),
        "generations": gens,
        "families": families,
    }


def format_summary(s: dict[str, Any]) -> str:
    """The summary as the text ``replaybank store inspect`` prints."""
    lines = [
        f"{s['path']}: episodic store, schema version {s['schema_version']}, {s['bytes'] / 2**10:.1f} KiB",
        f"  {s['episodes']:,} episodes ({s['successful_episodes']:,} successful, "
        f"{s['demonstrations']:,} demonstrations, {s['replayed_episodes']:,} replayed) from {s['attempts']:,} attempts",
    ]
    x = s["experiences"]
    if x["workflows"] or any(x["insights"].values()):
        lines.append(f"  experiences: {x['workflows']:,} workflows, {x['insights']['failure']:,} insights from failures,"
                     f" {x['insights']['success']:,} from successes")
    if s["generations"]:
        lines.append(f"  {'generation':>10}{'attempts':>10}{'episodes':>10}{'success':>9}{'reward':>8}")
        for g in s["generations"]:
            lines.append(
                f"  {g['generation']:>10}{g['attempts']:>10}{g['episodes']:>10}"
                f"{g['success_rate']:>9.1%}{g['mean_reward']:>8.3f}"
            )
    if s["families"]:
        lines.append("  families: " + ", ".join(
            f"{f['family'] or '(none)'} {f['attempts']} ({f['success_rate']:.0%})" for f in s["families"]
        ))
    return "\n".join(lines)
