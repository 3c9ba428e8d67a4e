"""The health of a run in ``hpctrain status`` and ``hpctrain results``: why it stopped
retrying, its failures by cause, the nodes blamed, and each attempt's step time per rank
(stragglers). Plain lines, from ``state.json``."""
from __future__ import annotations

from typing import Any, Dict, List

from hpctrain.allocation.stragglers import describe


def health_lines(state: Dict[str, Any]) -> List[str]:
    lines: List[str] = []
    gave_up = state.get("gave_up") or {}
    if gave_up.get("message"):
        lines.append(f"not retried: {gave_up['message']}")
    by_cause = state.get("failures_by_cause") or {}
    if by_cause:
        lines.append("failures by cause: " + ", ".join(f"{c} {n}" for c, n in
                                                       sorted(by_cause.items())))
    bad = state.get("bad_nodes") or []
    if bad:
        lines.append("nodes blamed: " + ", ".join(
            f"{b.get('host')} ({b.get('cause')}, attempt {b.get('attempt')})" for b in bad))
    for a in state.get("attempts") or []:
        pace = describe(a.get("pace"))
        if pace:
            lines.append(f"attempt {a.get('attempt')}: {pace}")
        if a.get("straggler"):
            lines.append(f"attempt {a.get('attempt')}: WARNING {a['straggler']}")
    return lines
