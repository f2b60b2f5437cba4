"""The three wiki tools. `db` is filled in by the environment (hidden from the model) or bound
by the MCP server; everything else is what the model sees."""

from __future__ import annotations

from rlvr.envs.tools import ToolCallError
from wiki_search.store import WikiDB


class WikiToolError(ToolCallError):
    """A call the model got wrong (unknown page, empty query): shown to it as a tool error."""


def search_pages(query: str, db: WikiDB) -> str:
    """Search the encyclopedia; returns the best-matching pages (id, title, snippet).

    Args:
        query: words to look for, e.g. a name or a title.
    """
    if not query.strip():
        raise WikiToolError("query is empty; pass some words to search for")
    hits = db.search(query)
    if not hits:
        return f"No pages match {query!r}. Try fewer or different words."
    return "\n".join(f"[{page_id}] {title} — {snippet}" for page_id, title, snippet in hits)


def view_sections(page_id: str, db: WikiDB) -> str:
    """List the sections of a page (section id and heading).

    Args:
        page_id: a page id from search_pages, e.g. "ada_kerr".
    """
    page = db.page(page_id.strip())
    if page is None:
        raise WikiToolError(f"no page with id {page_id!r}; use an id in brackets from search_pages")
    title, sections = page
    return f"Sections of {title}:\n" + "\n".join(f"[{sid}] {heading}" for sid, heading in sections)


def read_section(section_id: str, db: WikiDB) -> str:
    """Read one section of a page.

    Args:
        section_id: a section id from view_sections, e.g. "ada_kerr:early_life".
    """
    found = db.section(section_id.strip())
    if found is None:
        raise WikiToolError(f"no section with id {section_id!r}; use an id in brackets from view_sections")
    title, heading, text = found
    return f"{title} — {heading}\n{text}"


TOOLS = (search_pages, view_sections, read_section)
