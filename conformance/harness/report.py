"""The known failures list, the per-suite table and the skip list.

conformance/known_failures.txt holds one line per case expected to fail: `SUITE | CASE | CAUSE`,
CASE a case id or a pattern of them (`*` any text, `?` one character; brackets are literal). A run fails when a case fails that no
line names, so CI catches regressions but not the gaps already known; a known failure that passes
is reported, to be taken off the list.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path

from .core import FAIL, PASS, SKIP, Case


class KnownFailures:
    def __init__(self, path: Path):
        self.entries: list[tuple[str, str, str]] = []
        if not path.exists():
            return
        for n, line in enumerate(path.read_text().splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(" | ")]
            if len(parts) != 3:
                raise ValueError(f"{path}:{n}: want 'SUITE | CASE | CAUSE', got {line!r}")
            self.entries.append((parts[0], parts[1], parts[2]))

    def cause(self, case: Case) -> str | None:
        for suite, pattern, cause in self.entries:
            if suite == case.suite and (pattern == case.id or _wildcard(pattern).fullmatch(case.id)):
                return cause
        return None


def _wildcard(pattern: str) -> "re.Pattern[str]":
    """`*` (any text) and `?` (one character) as wildcards; everything else, brackets included
    (case ids are full of them), literally."""
    return re.compile(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."))


def summarize(cases: list[Case], known: KnownFailures):
    """Marks known failures; returns (per-suite counts, unexpected failures, known that passed)."""
    suites: "OrderedDict[str, dict]" = OrderedDict()
    unexpected, fixed = [], []
    for c in cases:
        s = suites.setdefault(c.suite, {PASS: 0, FAIL: 0, SKIP: 0, "known": 0})
        s[c.status] += 1
        cause = known.cause(c)
        if c.status == FAIL:
            if cause:
                c.known = cause
                s["known"] += 1
            else:
                unexpected.append(c)
        elif c.status == PASS and cause:
            fixed.append(c)
    return suites, unexpected, fixed


def table(suites) -> str:
    rows = ["| suite | passed | failed | skipped | applicable | pass rate |",
            "|---|---:|---:|---:|---:|---:|"]
    total = {PASS: 0, FAIL: 0, SKIP: 0}
    for name, s in suites.items():
        applicable = s[PASS] + s[FAIL]
        rate = f"{100 * s[PASS] / applicable:.0f}%" if applicable else "-"
        rows.append(f"| {name} | {s[PASS]} | {s[FAIL]} | {s[SKIP]} | {applicable} | {rate} |")
        for k in total:
            total[k] += s[k]
    applicable = total[PASS] + total[FAIL]
    rate = f"{100 * total[PASS] / applicable:.0f}%" if applicable else "-"
    rows.append(f"| **all** | {total[PASS]} | {total[FAIL]} | {total[SKIP]} | {applicable} | {rate} |")
    return "\n".join(rows)


def grouped(cases: list[Case], status: str, key) -> "OrderedDict[str, list[Case]]":
    out: "OrderedDict[str, list[Case]]" = OrderedDict()
    for c in cases:
        if c.status == status:
            out.setdefault(key(c), []).append(c)
    return out


def _listed(cs: list[Case], limit: int | None) -> str:
    shown = cs if limit is None or len(cs) <= limit else cs[:limit]
    text = ", ".join(f"{c.suite} `{c.id}`" for c in shown)
    if len(shown) < len(cs):
        text += f", and {len(cs) - len(shown)} more (`conformance/run.sh` lists them all)"
    return text


def skip_list(cases: list[Case], limit: int | None = None) -> str:
    """The skipped cases grouped by reason: `- reason (N): suite case, ...`."""
    lines = []
    for reason, cs in grouped(cases, SKIP, lambda c: c.detail).items():
        lines.append(f"- **{reason}** ({len(cs)}): " + _listed(cs, limit))
    return "\n".join(lines)


def failure_list(cases: list[Case], limit: int | None = None) -> str:
    lines = []
    for cause, cs in grouped(cases, FAIL, lambda c: c.known or "unexpected").items():
        lines.append(f"- **{cause}** ({len(cs)}): " + _listed(cs, limit))
    return "\n".join(lines)


def markdown(cases: list[Case], suites, header: str) -> str:
    return (f"{header}\n\n{table(suites)}\n\n"
            f"Failing cases, by cause:\n\n{failure_list(cases, 8) or '- none'}\n\n"
            f"Skipped cases, by reason:\n\n{skip_list(cases, 8) or '- none'}\n")
