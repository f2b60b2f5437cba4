"""What both report pages share: the skeleton (`templates/report.html`), escaping, tables."""

from __future__ import annotations

import html
import json
import string
from collections.abc import Iterable, Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

from rlvr.report.charts import number

REPORT = "report.html"
"""A report's file name, beside what it reports on."""


def e(value: Any) -> str:
    """`value` as HTML text: every piece of text from a run goes through here."""
    return html.escape(str(value), quote=True)


def write_page(path: Path, text: str) -> None:
    """Write a rendered page. A lone surrogate (run text keeps what a model sent, and UTF-8 has
    no form for it) is written as its escape, e.g. `\\ud800`, not raised as an encoding error;
    the page appears whole or not at all (written beside, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8", errors="backslashreplace")
    tmp.replace(path)


def page(title: str, body: Iterable[str]) -> str:
    """The whole page: the template's head and CSS around `body`."""
    from rlvr import __version__

    skeleton = files("rlvr").joinpath("templates", "report.html").read_text(encoding="utf-8")
    return string.Template(skeleton).substitute(title=e(title), body="\n".join(body), version=e(__version__))


def settings_table(rows: Mapping[str, Any]) -> str:
    """Names and values (JSON for anything but a string), e.g. a run's metadata."""
    cells = "".join(
        f"<tr><td>{e(k)}</td><td><code>{e(v if isinstance(v, str) else json.dumps(v, default=str))}</code></td></tr>"
        for k, v in rows.items()
    )
    return f'<table class="meta">{cells}</table>'


def numbers_table(numbers: Mapping[str, float], *, percent_digits: int = 1, digits: int = 3) -> str:
    """A row of named numbers, as the terminal prints them (`%` names with fewer digits)."""
    head = "".join(f"<th>{e(k)}</th>" for k in numbers)
    cells = "".join(
        f"<td class=num>{e(number(v, percent_digits if k.endswith('%') else digits))}</td>" for k, v in numbers.items()
    )
    return f'<table class="headline wide"><tr>{head}</tr><tr>{cells}</tr></table>'
