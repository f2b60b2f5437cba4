"""Deprecated: `check_env` moved to `rlvr.check`; import it as `from rlvr import check_env`.

Kept so that environments scaffolded by an older `rlvr init` (whose tests import
`rlvr.envs.check`) keep working; the layering test lists it as its one exception.
"""

from __future__ import annotations

import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name != "check_env":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        "rlvr.envs.check is deprecated: import check_env with `from rlvr import check_env`",
        DeprecationWarning,
        stacklevel=2,
    )
    from rlvr.check import check_env

    return check_env
