"""The OpenEnv app of a served rlvr environment, and running it with uvicorn."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.serve.models import RlvrAction, RlvrObservation
from rlvr.serve.session import Picker, ServedEnv
from rlvr.types import SamplingArgs

log = logging.getLogger("rlvr.serve")


def build_app(env: MultiTurnEnv[Any], *, sampling: SamplingArgs | None = None, max_sessions: int = 64) -> Any:
    """A FastAPI app speaking OpenEnv's protocol (`/ws` sessions, `/health`, `/schema`, ...),
    each session an episode of `env` sampled with `sampling` (default: the env's own).

    The app stops the environment (`env.aclose()`) when the server shuts down."""
    from openenv.core.env_server.http_server import create_fastapi_app

    picker = Picker()  # (shared by the sessions)
    chosen = sampling if sampling is not None else env.sampling

    def factory() -> ServedEnv:
        return ServedEnv(env, chosen, picker)

    app = create_fastapi_app(factory, RlvrAction, RlvrObservation, max_concurrent_envs=max_sessions)

    async def close_env() -> None:
        try:
            await env.aclose()
        except Exception as exc:  # noqa: BLE001 (shutting down: say so, never hang the stop)
            log.warning("closing the environment failed: %s", exc)

    app.router.on_shutdown.append(close_env)
    return app


def serve(env: MultiTurnEnv[Any], *, host: str, port: int, sampling: SamplingArgs, max_sessions: int) -> None:
    """Serve `env` until interrupted; the bound address is logged (port 0: a free one)."""
    import uvicorn

    app = build_app(env, sampling=sampling, max_sessions=max_sessions)
    config = uvicorn.Config(app, host=host, port=port, log_level="info", access_log=False, ws="websockets-sansio")
    asyncio.run(uvicorn.Server(config).serve())
