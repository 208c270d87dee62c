"""The comparison for humans: `plan check` and `plan diff` text (the JSON forms are Comparison.to_dict / diff_data)."""

from __future__ import annotations

from typing import Any

from planner.report.changes import Change, Delta, changes, fmt, layout_order, pct, same
from planner.report.compare import ABSENT, Comparison, _pruned, _search_counts, _with_summary, rank_diffs

_SHOWN_BREAKDOWN = 8  # breakdown terms named in the text report (all are in the JSON one)


def _table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    """A left-aligned text table: the title line, then a header and the rows in columns."""
    if not rows:
        return []
    cols = [header, *rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    lines = [title]
    for row in cols:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _change_rows(changes: list[Change]) -> list[tuple[str, ...]]:
    return [(c.key, fmt(c.old), fmt(c.new)) for c in changes]


def _delta_rows(deltas: list[Delta]) -> list[tuple[str, ...]]:
    return [(d.key, fmt(d.old), fmt(d.new), pct(d.rel_change) if d.moved else "same") for d in deltas]


def layout_text(layout: Any) -> str:
    """A layout on one line: 'tp=8 pp=4 dp=16 ...'."""
    if not isinstance(layout, dict):
        return fmt(layout)
    return " ".join(f"{k}={fmt(layout[k])}" for k in sorted(layout, key=lambda k: layout_order(str(k))))


def format_comparison(cmp: Comparison, title: str | None = None) -> str:
    """The comparison for humans: the verdict, then 'old vs new' columns for everything that moved."""
    o, n = cmp.old_label, cmp.new_label
    lines = [title] if title else []
    lines.append(cmp.summary())
    if cmp.old_layout is not None:
        lines.append(f"rank-1 layout ({o}): {layout_text(cmp.old_layout)}")
    if cmp.new_layout is not None and cmp.layout_changes:
        lines.append(f"rank-1 layout ({n}): {layout_text(cmp.new_layout)}")
    sections = [
        _table("rank-1 layout changes:", ("key", o, n), _change_rows(cmp.layout_changes)),
        _table("rank-1 metrics:", ("metric", o, n, "change"), _delta_rows(cmp.metrics)),
    ]
    terms = cmp.breakdown[:_SHOWN_BREAKDOWN]
    more = len(cmp.breakdown) - len(terms)
    breakdown = _table("rank-1 breakdown terms that moved most:", ("term", o, n, "change"), _delta_rows(terms))
    if more > 0:
        breakdown.append(f"  ... and {more} more (see --format json)")
    sections.append(breakdown)
    sections.append(_table("inputs that differ:", ("key", o, n), _change_rows(cmp.inputs)))
    if cmp.catalog_drift:
        sections.append(_table("recorded inputs that differ from today's catalog entry (the gate re-plans the "
                               "recorded values):", ("key", "recorded", "catalog"), _change_rows(cmp.catalog_drift)))
    if cmp.planner_version is not None:
        sections.append([f"planner_version: {fmt(cmp.planner_version.old)} ({o}) vs "
                         f"{fmt(cmp.planner_version.new)} ({n})"])
    sections.append(_table("search.pruned counts that changed:", ("rule", o, n), _change_rows(cmp.pruned)))
    sections.append(_table("search counts that changed:", ("key", o, n), _change_rows(cmp.search)))
    if cmp.notes:
        sections.append([f"note: {note}" for note in cmp.notes])
    for section in sections:
        lines.extend(section)
    return "\n".join(lines) + "\n"


def check_ok_line(cmp: Comparison, source: str) -> str:
    """The one line `plan check` prints to stderr when the baseline still holds."""
    line = f"{source}: {cmp.summary()}"
    if cmp.planner_version is not None:
        line += f" (planner {fmt(cmp.planner_version.old)} -> {fmt(cmp.planner_version.new)})"
    if cmp.catalog_drift:
        keys = ", ".join(c.key for c in cmp.catalog_drift[:3]) + (" ..." if len(cmp.catalog_drift) > 3 else "")
        line += f"; note: today's catalog differs from the recorded inputs ({keys}); re-record to adopt it"
    return line


def diff_documents(a: dict[str, Any], b: dict[str, Any], a_label: str = "A", b_label: str = "B") -> str:
    """Two plan documents side by side for code review: inputs that differ, rank-by-rank layout changes, metric deltas
    with percentages, planner version and prune-count changes."""
    ranks = rank_diffs(a, b)
    lines = [f"A = {a_label}", f"B = {b_label}"]
    inputs = changes(_with_summary(a), _with_summary(b))
    lines += _table("inputs that differ:", ("key", "A", "B"), _change_rows(inputs)) or ["inputs: identical"]
    version_a, version_b = a.get("planner_version", ABSENT), b.get("planner_version", ABSENT)
    if not same(version_a, version_b):
        lines.append(f"planner_version: {fmt(version_a)} (A) vs {fmt(version_b)} (B)")
    for row in ranks:
        r = row.rank
        if row.layout_a is None:
            lines.append(f"rank {r}: only in B: {layout_text(row.layout_b)}")
            continue
        if row.layout_b is None:
            lines.append(f"rank {r}: only in A: {layout_text(row.layout_a)}")
            continue
        if row.layout_changes:
            moved = f"; B's rank {r} was rank {row.b_rank_in_a} in A" if row.b_rank_in_a not in (None, r) else ""
            lines.append(f"rank {r}: layout changed{moved}")
            lines += _table("", ("key", "A", "B"), _change_rows(row.layout_changes))[1:]
        else:
            lines.append(f"rank {r}: same layout: {layout_text(row.layout_a)}")
        if any(d.moved for d in row.metrics):
            lines += _table("", ("metric", "A", "B", "change"), _delta_rows(row.metrics))[1:]
        else:
            lines.append("  metrics: identical")
    lines += _table("search.pruned counts that differ:", ("rule", "A", "B"),
                    _change_rows(changes(_pruned(a), _pruned(b))))
    lines += _table("search counts that differ:", ("key", "A", "B"),
                    _change_rows(changes(_search_counts(a), _search_counts(b))))
    return "\n".join(lines) + "\n"
