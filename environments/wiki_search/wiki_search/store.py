"""The encyclopedia on disk: an SQLite database with an FTS5 full-text index (BM25 ranking).

The index is built once per (seed, size, generator version) and cached in
`$RLVR_WIKI_CACHE`, else `$XDG_CACHE_HOME/rlvr/wiki_search`, else `~/.cache/rlvr/wiki_search`.
A build writes a temporary file and renames it into place, so a crashed or concurrent build
never leaves a half-written index behind; `ensure_index(..., rebuild=True)` rebuilds.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rlvr.errors import EnvError
from wiki_search import articles
from wiki_search.world import GENERATOR_VERSION, World

_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE pages(id TEXT PRIMARY KEY, title TEXT NOT NULL, kind TEXT NOT NULL);
CREATE TABLE sections(id TEXT PRIMARY KEY, page_id TEXT NOT NULL, position INTEGER NOT NULL,
                      heading TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX sections_page ON sections(page_id, position);
CREATE VIRTUAL TABLE pages_fts USING fts5(page_id UNINDEXED, title, body, tokenize='unicode61');
"""
TITLE_WEIGHT = 10.0
"""BM25 weight of a title match relative to a body match."""


def require_fts5() -> None:
    """Raise `EnvError` when this Python's sqlite3 lacks FTS5 (the search index needs it)."""
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    except sqlite3.OperationalError as exc:
        raise EnvError(
            f"wiki_search needs SQLite's FTS5 full-text index, but this Python's sqlite3 (SQLite "
            f"{sqlite3.sqlite_version}) was built without it ({exc}); use a Python whose SQLite has FTS5 "
            "(python.org, Debian/Ubuntu, Homebrew and conda builds do)"
        ) from None


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where indexes are cached (see the module docstring)."""
    if override is not None:
        return Path(override)
    if os.environ.get("RLVR_WIKI_CACHE"):
        return Path(os.environ["RLVR_WIKI_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rlvr" / "wiki_search"


def index_path(seed: int, size: str, directory: str | os.PathLike[str] | None = None) -> Path:
    return cache_dir(directory) / f"wiki-v{GENERATOR_VERSION}-seed{seed}-{size}.sqlite"


@dataclass
class BuildInfo:
    path: Path
    built: bool
    """False when a valid cached index was used."""
    seconds: float
    pages: int
    sections: int
    bytes: int


def _is_valid(path: Path) -> bool:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return meta.get("generator_version") == str(GENERATOR_VERSION) and meta.get("complete") == "1"


def build_index(world: World, path: Path) -> tuple[int, int]:
    """Write the world's articles to a fresh database at `path`; (pages, sections)."""
    require_fts5()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.unlink(missing_ok=True)
    pages = articles.pages(world)
    con = sqlite3.connect(tmp)
    try:
        con.executescript(_SCHEMA)
        with con:
            con.executemany("INSERT INTO pages VALUES (?, ?, ?)", [(p.id, p.title, p.kind) for p in pages])
            con.executemany(
                "INSERT INTO sections VALUES (?, ?, ?, ?, ?)",
                [(s.id, p.id, i, s.heading, s.body) for p in pages for i, s in enumerate(p.sections)],
            )
            con.executemany(
                "INSERT INTO pages_fts VALUES (?, ?, ?)",
                [(p.id, p.title, "\n".join(f"{s.heading}. {s.body}" for s in p.sections)) for p in pages],
            )
            con.execute("INSERT INTO pages_fts(pages_fts) VALUES ('optimize')")
            con.executemany(
                "INSERT INTO meta VALUES (?, ?)",
                [
                    ("generator_version", str(GENERATOR_VERSION)),
                    ("seed", str(world.seed)),
                    ("size", world.size),
                    ("complete", "1"),
                ],
            )
    finally:
        con.close()
    os.replace(tmp, path)
    return len(pages), sum(len(p.sections) for p in pages)


def ensure_index(world: World, directory: str | os.PathLike[str] | None = None, *, rebuild: bool = False) -> BuildInfo:
    """The index of `world`, built now when missing, stale, corrupt, or `rebuild` is set."""
    path = index_path(world.seed, world.size, directory)
    t0 = time.monotonic()
    if not rebuild and _is_valid(path):
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            pages, sections = (con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("pages", "sections"))
        finally:
            con.close()
        return BuildInfo(path, False, time.monotonic() - t0, pages, sections, path.stat().st_size)
    pages, sections = build_index(world, path)
    return BuildInfo(path, True, time.monotonic() - t0, pages, sections, path.stat().st_size)


class WikiDB:
    """Read-only queries on an index; safe to share between threads (one lock per handle).

    The connection opens on first use and again after `close()`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        require_fts5()
        if not Path(path).is_file():
            raise EnvError(f"no wiki index at {path}; build it with wiki_search.store.ensure_index")
        self.path = Path(path)
        self._con: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def _rows(self, sql: str, args: tuple[object, ...]) -> list[tuple[object, ...]]:
        with self._lock:
            if self._con is None:
                self._con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            return self._con.execute(sql, args).fetchall()

    def search(self, query: str, limit: int = 5) -> list[tuple[str, str, str]]:
        """(page id, title, snippet) of the best matches: all words first, then any word."""
        words = re.findall(r"\w+", query)
        if not words:
            return []
        sql = (
            "SELECT page_id, title, snippet(pages_fts, 2, '', '', ' ... ', 16) FROM pages_fts "
            f"WHERE pages_fts MATCH ? ORDER BY bm25(pages_fts, 0.0, {TITLE_WEIGHT}, 1.0) LIMIT ?"
        )
        quoted = ['"' + w.replace('"', "") + '"' for w in words]
        rows = self._rows(sql, (" AND ".join(quoted), limit))
        if not rows and len(words) > 1:
            rows = self._rows(sql, (" OR ".join(quoted), limit))
        return [(str(a), str(b), " ".join(str(c).split())) for a, b, c in rows]

    def page(self, page_id: str) -> tuple[str, list[tuple[str, str]]] | None:
        """(title, [(section id, heading)]) of a page, or None."""
        found = self._rows("SELECT title FROM pages WHERE id = ?", (page_id,))
        if not found:
            return None
        rows = self._rows("SELECT id, heading FROM sections WHERE page_id = ? ORDER BY position", (page_id,))
        return str(found[0][0]), [(str(a), str(b)) for a, b in rows]

    def section(self, section_id: str) -> tuple[str, str, str] | None:
        """(page title, heading, text) of a section, or None."""
        rows = self._rows(
            "SELECT p.title, s.heading, s.body FROM sections s JOIN pages p ON p.id = s.page_id WHERE s.id = ?",
            (section_id,),
        )
        return (str(rows[0][0]), str(rows[0][1]), str(rows[0][2])) if rows else None
