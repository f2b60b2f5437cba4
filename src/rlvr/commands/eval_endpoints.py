"""`rlvr eval` and its endpoints: the URLs of `-b` (one, several, a file of them), and what the
run prints about them at its end: the token limit every request carried and how many replies
hit it, each endpoint's probe, requests, failures and latency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.errors import UsageError


def base_urls(values: list[str] | str | None) -> str | list[str] | None:
    """The endpoints of `-b`: each value a URL or a file of URLs (one a line, `#` comments);
    one URL stays a string."""
    if values is None or isinstance(values, str):
        return values
    urls: list[str] = []
    for value in values:
        if "://" in value:
            urls.append(value)
            continue
        path = Path(value)
        if not path.is_file():
            raise UsageError(f"-b {value}: neither a URL (http://HOST:PORT/v1) nor a file of URLs")
        lines = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
        found = [line for line in lines if line]
        if not found:
            raise UsageError(f"-b {value}: the file lists no URL")
        urls += found
    return urls[0] if len(urls) == 1 else urls


class LimitHits:
    """Counts the replies of a run, and those that stopped at the token limit."""

    def __init__(self) -> None:
        self.replies = self.hit = 0

    def add(self, rollout: Any) -> None:
        self.replies += len(rollout.turns)
        self.hit += sum(t.completion.finish_reason == "length" for t in rollout.turns)

    def line(self, limit: int | None, source: str) -> str:
        """The summary's line: the token limit sent with every request (from `source`; None:
        the endpoint's own), and how many replies hit it."""
        shown = "the endpoint's own" if limit is None else limit
        return f"max tokens per reply: {shown} ({source}); {self.hit} of {self.replies} replies hit it"


def print_endpoints(client: Any) -> None:
    """Each endpoint's probe (before the run; not a request), requests, failures and latency,
    after a run against several."""
    pool = getattr(client, "endpoints", None)
    if pool is None or len(pool.endpoints) < 2:
        return
    print("endpoints:")
    for row in pool.stats():
        failed = ", ".join(f"{n} {why}" for why, n in sorted(row["failed"].items())) or "none"
        latency = (
            f"latency ms mean {row['latency_ms_mean']}, p50 {row['latency_ms_p50']}, p95 {row['latency_ms_p95']}"
            if row["answered"]
            else "no answers"
        )
        probe = f"probe {row['probe']}; " if row.get("probe") else ""
        print(
            f"  {row['url']}: {probe}{row['requests']} requests, {row['answered']} answered, "
            f"failed: {failed}; {latency}"
        )


def add_env_server_args(p: Any) -> None:
    """--env-server: play the environment on `rlvr serve` processes (`rlvr.serve.remote`)."""
    p.add_argument(
        "--env-server",
        action="append",
        default=None,
        metavar="URL",
        help="play the environment on this `rlvr serve ENV` server (repeat it for several: rollouts go to the "
        "least busy; a failed server's rollouts move on to another)",
    )


def with_env_servers(args: Any, env: Any) -> Any:
    """`env`, or with --env-server, `env` played on those servers."""
    if not getattr(args, "env_server", None):
        return env
    from rlvr.errors import import_extra

    import_extra("openenv.core", "openenv", "env servers", "openenv-core")
    from rlvr.serve.remote import RemoteEnv

    return RemoteEnv(env, args.env_server)


def env_server_stats(env: Any) -> dict[str, Any]:
    """metadata.json's `env_servers`: each server's finished rollouts and failures."""
    from rlvr.serve.remote import RemoteEnv

    return {"env_servers": env.pool.stats()} if isinstance(env, RemoteEnv) else {}
