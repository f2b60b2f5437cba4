"""These tests borrow two helpers from the suite: `load_module` (tests/loading.py) and the
scripted tic-tac-toe players (environments/tictactoe/tests/exact_players.py)."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]
for _folder in (_ROOT / "tests", _ROOT / "environments" / "tictactoe" / "tests"):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))
