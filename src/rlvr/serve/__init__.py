"""rlvr environments as OpenEnv servers (`rlvr serve ENV`; needs the `openenv` extra).

OpenEnv (https://github.com/meta-pytorch/OpenEnv) serves environments over HTTP and WebSocket:
a client opens a session, `reset`s it, `step`s it with typed actions and reads its `state`.
`rlvr serve tictactoe --port 8000` puts any installed rlvr environment behind that protocol, so
OpenEnv's own clients (`GenericEnvClient`, `rlvr.serve.models.RlvrEnvClient`) and what is built
on them (TRL's OpenEnv integration) can play it:

- `reset(task=I, rollout=R, split="eval")` starts episode R of task I (default: the session's
  next task, or `seed % tasks` when only `seed` is given); its observation's `messages` are the
  prompt (system and user messages), `tools` the tool schemas of the turn (None: no tools).
- `step(RlvrAction(content=..., tool_calls=[...]))` is the model's turn; the observation's
  `messages` are the environment's reply (tool results, the opponent's move), `done` says
  whether the episode ended, and at the end `reward` is the rubric's total and
  `rewards` each reward function's score (the same record `rlvr eval` writes, with
  `stop_reason` and `error`). Before the end `reward` is 0.
- Each observation's `sampling` holds the sampling arguments of the next turn, its
  seed included, so a player seeded from it plays exactly as under `rlvr eval`: the same player
  and seeds give the same rewards.

Underneath, each session runs the environment's own `rollout` (the loop `rlvr eval` runs)
against a client whose replies are the session's steps, and scores it with `rlvr.engine`'s
`score_group`: nothing about the episode is re-implemented.
"""

from __future__ import annotations

__all__ = ["build_app"]


def __getattr__(name: str) -> object:
    if name == "build_app":
        from rlvr.serve.app import build_app

        return build_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
