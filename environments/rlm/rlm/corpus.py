"""The long context and its questions, from wiki_search's seeded world.

The context is every article of a `wiki_search.world.World` joined into one string, in the
articles' own order, each page as

    # Title
    ## Heading
    Section text.

and pages separated by a blank line: the `full` world gives 2,992 pages and 1,329,019
characters (seed 0), the `small` one 295 pages and 131,482. The questions are wiki_search's
own (`wiki_search.questions.make_tasks`: one to three hops, exact answers), so a question
that needs three pages needs three far-apart places of the context.
"""

from __future__ import annotations

import functools

from wiki_search.articles import Page, pages
from wiki_search.questions import make_tasks
from wiki_search.world import World

from rlvr.types import Task


def render(page: Page) -> str:
    """One page as it appears in the context.

    >>> from wiki_search.articles import Section
    >>> print(render(Page("x", "Holm", "city", [Section("x:o", "Overview", "Holm is a city.")])))
    # Holm
    ## Overview
    Holm is a city.
    """
    return "\n".join([f"# {page.title}", *(f"## {s.heading}\n{s.body}" for s in page.sections)])


@functools.cache
def _world(seed: int, size: str) -> World:
    return World(seed, size)


@functools.cache
def build_context(seed: int, size: str) -> str:
    """The whole encyclopedia of the world (seed, size) as one string (cached per process)."""
    return "\n\n".join(render(p) for p in pages(_world(seed, size)))


def page_text(context: str, title: str) -> str | None:
    """The page called `title`, cut out of the context (None when there is none).

    >>> page_text("# A\\n## S\\nx.\\n\\n# B\\n## S\\ny.", "B")
    '# B\\n## S\\ny.'
    """
    padded = "\n" + context
    start = padded.find(f"\n# {title}\n")
    if start < 0:
        return None
    end = padded.find("\n# ", start + 1)
    return padded[start + 1 : end if end >= 0 else len(padded)].rstrip("\n")


def questions(seed: int, size: str, split: str, count: int, min_hops: int, max_hops: int) -> list[Task]:
    """wiki_search's questions of this world and split (the same ids, answers and hops)."""
    return make_tasks(_world(seed, size), split, count, seed, min_hops, max_hops)
