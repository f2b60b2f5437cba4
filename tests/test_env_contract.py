"""The environment contract around the loop: where things live, and the deprecated names."""

from __future__ import annotations

import pytest

import rlvr
from rlvr.check import check_env


def test_check_env_is_exported_and_the_old_path_warns() -> None:
    assert rlvr.check_env is check_env
    with pytest.warns(DeprecationWarning, match="from rlvr import check_env"):
        from rlvr.envs.check import check_env as old
    assert old is check_env
