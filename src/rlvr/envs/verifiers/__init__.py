"""verifiers environments in rlvr (needs the `verifiers` extra).

verifiers (https://github.com/PrimeIntellect-ai/verifiers) writes environments with its classic
API: `vf.SingleTurnEnv`, `vf.MultiTurnEnv` (`env_response` and `@vf.stop` conditions),
`vf.ToolEnv` / `vf.StatefulToolEnv` (Python functions as tools), parsers, and rubrics of
weighted reward functions. The `verifiers` environment plays one of them through rlvr's engine,
eval, gen and trainer: ``rlvr eval verifiers -a '{"env": "my_vf_env", "difficulty": 2}'`` loads
the module `my_vf_env` with verifiers' own `load_environment` (arguments besides `env` and
`max_tokens` go to it); `wrap(vf_env)` takes an instance built in Python.

- Tasks: the env's dataset rows (train) and eval rows, id `{split}-{example_id}`, the row's
  prompt (system prompt included, as verifiers formats it), answer and info.
- Turns: rlvr's client plays every model turn (with the env's tools offered as OpenAI
  schemas); each turn is appended to verifiers' own trajectory, verifiers' stop conditions run
  after it (`verifiers_done`, or `verifiers_cut` for max turns, errors and timeouts; the
  condition's name in the rollout's `info.verifiers_stop`), and otherwise its `env_response`
  answers (a tool env runs the tools).
- Rewards: verifiers' rubric scores the episode (`score_group`), each of its functions an rlvr
  reward function of the same name and weight, so the total is verifiers' reward.

Not bridged: environments that ask the model themselves through `state["client"]`, and
verifiers' 0.4 tasksets / harnesses (`verifiers.v1`). Details: docs/environments.md.
"""

from rlvr.envs.verifiers.env import VerifiersEnv, VerifiersState, load_environment, verifiers_module, wrap

__all__ = ["VerifiersEnv", "VerifiersState", "load_environment", "verifiers_module", "wrap"]
