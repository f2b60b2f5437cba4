"""The wiki tools as an MCP server (the `mcp` SDK, version 2).

    python -m wiki_search.server --db PATH                 # stdio (what `mcp=True` starts)
    python -m wiki_search.server --db PATH --http 8000     # streamable HTTP at http://127.0.0.1:8000/mcp

`--db` defaults to the cached index of `--seed`/`--size` (built if missing). Tool names,
descriptions and parameter descriptions are those of the in-process tools; a call the model
got wrong is returned as an MCP tool error with the same message.
"""
# No `from __future__ import annotations` here: the SDK evaluates the tools' annotations.

import argparse
from collections.abc import Callable
from typing import Annotated, Any

from rlvr.envs.tools import tool_schema
from wiki_search import tools
from wiki_search.store import WikiDB, ensure_index
from wiki_search.world import World


def build_server(db: WikiDB) -> Any:
    """An `MCPServer` serving `search_pages`, `view_sections` and `read_section` over `db`."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    app = MCPServer("wiki_search", log_level="WARNING")

    def described(fn: Callable[..., str]) -> tuple[str, Any]:
        schema = tool_schema(fn, hidden=("db",))["function"]
        [(param, spec)] = schema["parameters"]["properties"].items()
        return schema["description"], Annotated[str, Field(description=spec.get("description", param))]

    def run(fn: Callable[..., str], **args: str) -> str:
        try:
            return fn(**args, db=db)
        except tools.WikiToolError as exc:
            raise ToolError(str(exc)) from None

    doc, query_t = described(tools.search_pages)

    @app.tool(description=doc, structured_output=False)
    def search_pages(query: query_t) -> str:  # type: ignore[valid-type]
        return run(tools.search_pages, query=query)

    doc, page_t = described(tools.view_sections)

    @app.tool(description=doc, structured_output=False)
    def view_sections(page_id: page_t) -> str:  # type: ignore[valid-type]
        return run(tools.view_sections, page_id=page_id)

    doc, section_t = described(tools.read_section)

    @app.tool(description=doc, structured_output=False)
    def read_section(section_id: section_t) -> str:  # type: ignore[valid-type]
        return run(tools.read_section, section_id=section_id)

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m wiki_search.server", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", default=None, help="index file (default: the cached index of --seed/--size)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", default="full", choices=["full", "small"])
    parser.add_argument("--http", type=int, default=None, metavar="PORT", help="serve streamable HTTP on this port")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    path = args.db or ensure_index(World(args.seed, args.size)).path
    db = WikiDB(path)
    try:
        app = build_server(db)
        if args.http is None:
            app.run()
        else:
            app.run(transport="streamable-http", host=args.host, port=args.http)
    finally:
        db.close()


if __name__ == "__main__":
    main()
