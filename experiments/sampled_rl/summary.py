"""W/D/L, lost and rejected-move games of each 1,000-game evaluation under RUN/eval, and the kept
best's record; one JSON line a run (RUN/summary.json too)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def summarize(run: Path) -> dict[str, object]:
    out: dict[str, object] = {"run": run.name}
    for path in sorted(run.glob("eval/*/results.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        m = [r.get("rewards") or {} for r in rows]
        lost = sum(1 for x in m if x.get("loss", 0) > 0)
        won = sum(1 for x in m if x.get("win", 0) > 0)
        out[path.parent.name] = {
            "games": len(rows),
            "wdl": [won, len(rows) - won - lost, lost],
            "rejected_move_games": sum(1 for x in m if x.get("invalid_moves", 0) > 0),
            "errors": sum(1 for r in rows if r.get("error")),
        }
    record = run / "rl" / "best" / "keep_best.json"
    if record.exists():
        out["kept"] = json.loads(record.read_text())
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        found = summarize(Path(arg))
        (Path(arg) / "summary.json").write_text(json.dumps(found, indent=1))
        print(json.dumps(found))
