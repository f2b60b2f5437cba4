"""`rlvr serve ENV`: serve an installed environment over OpenEnv's protocol (needs `rlvr[openenv]`).

OpenEnv's clients (`openenv.core.GenericEnvClient`, `rlvr.serve.models.RlvrEnvClient`) and
what is built on them (TRL's OpenEnv integration) play it over a WebSocket session each:
`reset(task=I, rollout=R)` gives the prompt messages and tools, `step({"content": ...,
"tool_calls": [...]})` plays a model turn and gives the environment's reply; the last step
carries the rubric's reward, the same as `rlvr eval` gives with the same player and seeds.
`rlvr eval ENV --env-server URL ...` plays ENV on such servers (scale-out). Details:
docs/environments.md, "OpenEnv, both ways"; docs/evaluation.md, "Environment servers".
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rlvr.commands.sampling import add_sampling_args, json_object, parse_sampling_args


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve an environment over OpenEnv's protocol",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("env", help="environment name (see `rlvr list`)")
    p.add_argument("-a", "--env-args", default="{}", metavar="JSON", help="environment arguments as a JSON object")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on; 0 picks a free one (default 8000)")
    p.add_argument("--max-sessions", type=int, default=64, help="most sessions open at once (default 64)")
    add_sampling_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rlvr.errors import UsageError, import_extra
    from rlvr.registry import load_environment

    import_extra("openenv.core", "openenv", "rlvr serve", "openenv-core")
    from rlvr.serve.app import serve

    if args.max_sessions < 1:
        raise UsageError(f"--max-sessions must be >= 1, got {args.max_sessions}")
    env_args = json_object("-a", args.env_args, '{"num_tasks": 10}')
    env = load_environment(args.env, **env_args)
    sampling = env.sampling.replace(**parse_sampling_args(args.sampling_args))
    if args.max_tokens is not None:
        sampling = sampling.replace(max_tokens=args.max_tokens)
    if args.temperature is not None:
        sampling = sampling.replace(temperature=args.temperature)
    print(f"serving {args.env} {json.dumps(env_args)} over OpenEnv at http://{args.host}:{args.port}", flush=True)
    serve(env, host=args.host, port=args.port, sampling=sampling, max_sessions=args.max_sessions)
    return 0
