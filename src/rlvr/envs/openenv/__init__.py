"""OpenEnv environments as rlvr environments (needs the `openenv` extra).

OpenEnv (https://github.com/meta-pytorch/OpenEnv) serves environments over HTTP and WebSocket
with typed actions: `reset`, `step`, `state`. The `openenv` environment plays any of them
through OpenEnv's own client (`GenericEnvClient`, one WebSocket session per rollout):

    rlvr eval openenv -a '{"url": "http://127.0.0.1:8000"}' -m MODEL
    rlvr eval openenv -a '{"app": "echo_env.server.app:app"}' -m MODEL

- Where: `url`, a running server (Docker, a Hugging Face Space, `rlvr serve`), or `app`, the
  import path of an OpenEnv app that rlvr starts here as a uvicorn process (OpenEnv's runtime
  provider interface, `rlvr.envs.openenv.provider.LocalServer`: no Docker), on a free port,
  stopped when the run ends.
- Task i resets the environment with seed `mix_seed(seed, i)` (plus `reset_args`); the reset's
  observation is the prompt, after a system prompt made from the action's schema.
- Actions (read from the server's `/schema`): an action with one text field (`message`,
  `answer`, ...) is filled with the reply's text (its `<think>` part removed); any other action
  is written by the model as a JSON object. A reply the server refuses reaches the model as
  `Invalid action: ...` and counts in `invalid_actions`; the episode goes on.
- Observations: the fields other than done/reward/metadata, as one user message (one field: its
  text; more: `name: value` lines; `observation_field` picks one). A server made by `rlvr
  serve` is recognised by its schema: its messages and tools pass through as they are, and the
  reply's tool calls become the action's.
- The episode ends when the environment says `done` (terminated) or at `max_turns` (truncated).
- Rewards (`rlvr.rubric.Rubric`): `total_reward`, the sum of the step rewards (weight 1; with
  `reward="last"`, `final_reward`, the last step's, has it instead), `invalid_actions`
  (weight 0, a metric).
"""

from rlvr.envs.openenv.env import OpenEnvEnv, OpenEnvState, load_environment, openenv_core

__all__ = ["OpenEnvEnv", "OpenEnvState", "load_environment", "openenv_core"]
