"""Questions about the world that need one to three page lookups, with exact answers.

A `Template` says how to phrase a question about a subject, how to compute its answer from
the world's relations (`path`, then `value`), and where a reader finds each step in the
articles (`reads`: section heading, fact sentence, field). Tests check that reading the
articles the way `reads` says gives the same answer as the relations, for every template.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from rlvr.types import Task
from wiki_search.articles import FACTS
from wiki_search.world import Entity, World


@dataclass(frozen=True)
class Template:
    name: str
    text: str
    """The question, with `{s}` for the subject's name."""
    subject: tuple[str, ...]
    """Entity kinds the subject may have."""
    path: tuple[str, ...]
    """Relations followed from the subject before reading the answer."""
    value: str
    """The answer on the last entity: `year`, `link:REL`, `num:NAME` or `extra:NAME`."""
    reads: tuple[tuple[str, str, str], ...]
    """One (section heading, FACTS key, field) per page read, in order."""

    @property
    def hops(self) -> int:
        """Pages that must be read to answer."""
        return len(self.reads)


_ORG = ("university", "company")
_BORN_YEAR, _BORN_CITY = ("Early life", "born", "year"), ("Early life", "born", "city")
_STUDIED, _MENTOR = ("Education", "studied", "university"), ("Education", "mentor", "mentor")
_FOUNDER, _FOUNDED = ("History", "org_founded", "founder"), ("History", "org_founded", "year")
_CREATOR, _COUNTRY = ("Overview", "work", "creator"), ("Overview", "city_country", "country")
_CAPITAL, _MAYOR = ("Overview", "capital", "capital"), ("Government", "mayor", "mayor")

TEMPLATES = (
    Template("birth_year", "In what year was {s} born?", ("person",), (), "year", (_BORN_YEAR,)),
    Template("birth_city", "In which city was {s} born?", ("person",), (), "link:birth_city", (_BORN_CITY,)),
    Template("university", "At which university did {s} study?", ("person",), (), "link:university", (_STUDIED,)),
    Template("mentor", "Who was the mentor of {s}?", ("person",), (), "link:mentor", (_MENTOR,)),
    Template("founder", "Who founded {s}?", _ORG, (), "link:founder", (_FOUNDER,)),
    Template("founded", "In what year was {s} founded?", _ORG, (), "year", (_FOUNDED,)),
    Template("capital", "What is the capital of {s}?", ("country",), (), "link:capital", (_CAPITAL,)),
    Template("creator", "Who created {s}?", ("work",), (), "link:creator", (_CREATOR,)),
    Template(
        "height", "How high is {s}, in metres?", ("mountain",), (), "num:height", (("Overview", "height", "height"),)
    ),
    Template("city_country", "In which country is the city of {s}?", ("city",), (), "link:country", (_COUNTRY,)),
    Template("mayor", "Who is the current mayor of {s}?", ("city",), (), "link:mayor", (_MAYOR,)),
    Template(
        "founder_born", "In what year was the founder of {s} born?", _ORG, ("founder",), "year", (_FOUNDER, _BORN_YEAR)
    ),
    Template(
        "birth_country",
        "In which country was {s} born?",
        ("person",),
        ("birth_city",),
        "link:country",
        (_BORN_CITY, _COUNTRY),
    ),
    Template(
        "creator_city",
        "In which city was the creator of {s} born?",
        ("work",),
        ("creator",),
        "link:birth_city",
        (_CREATOR, _BORN_CITY),
    ),
    Template(
        "creator_mentor",
        "Who was the mentor of the creator of {s}?",
        ("work",),
        ("creator",),
        "link:mentor",
        (_CREATOR, _MENTOR),
    ),
    Template(
        "university_city",
        "In which city is the university where {s} studied?",
        ("person",),
        ("university",),
        "link:city",
        (_STUDIED, ("Overview", "org_based", "city")),
    ),
    Template(
        "birth_river",
        "On which river lies the city where {s} was born?",
        ("person",),
        ("birth_city",),
        "link:river",
        (_BORN_CITY, ("Geography", "river", "river")),
    ),
    Template(
        "city_currency",
        "What is the currency of the country in which {s} lies?",
        ("city",),
        ("country",),
        "extra:currency",
        (_COUNTRY, ("Economy", "currency", "currency")),
    ),
    Template(
        "mayor_born",
        "In what year was the current mayor of {s} born?",
        ("city",),
        ("mayor",),
        "year",
        (_MAYOR, _BORN_YEAR),
    ),
    Template(
        "founder_country",
        "In which country was the founder of {s} born?",
        _ORG,
        ("founder", "birth_city"),
        "link:country",
        (_FOUNDER, _BORN_CITY, _COUNTRY),
    ),
    Template(
        "creator_university_founded",
        "In what year was the university attended by the creator of {s} founded?",
        ("work",),
        ("creator", "university"),
        "year",
        (_CREATOR, _STUDIED, _FOUNDED),
    ),
    Template(
        "birth_capital",
        "What is the capital of the country in which {s} was born?",
        ("person",),
        ("birth_city", "country"),
        "link:capital",
        (_BORN_CITY, _COUNTRY, _CAPITAL),
    ),
    Template(
        "creator_mentor_city",
        "In which city was the mentor of the creator of {s} born?",
        ("work",),
        ("creator", "mentor"),
        "link:birth_city",
        (_CREATOR, _MENTOR, _BORN_CITY),
    ),
)


def resolve(world: World, template: Template, subject: Entity) -> tuple[str, list[str]] | None:
    """(answer, titles of the pages read) for `subject`, or None when a relation is missing."""
    if subject.kind not in template.subject:
        return None
    entity, chain = subject, [subject.name]
    for rel in template.path:
        if rel not in entity.links:
            return None
        entity = world.entities[entity.links[rel]]
        chain.append(entity.name)
    kind, _, key = template.value.partition(":")
    if kind == "year":
        return str(entity.year), chain
    table = {"link": entity.links, "num": entity.numbers, "extra": entity.extra}[kind]
    return (str(table[key]), chain) if key in table else None


def fact_pattern(fact: str, field: str) -> re.Pattern[str]:
    """A regex for one FACTS sentence capturing `field` (every other field matches loosely).

    >>> fact_pattern("studied", "university").search("Ada Kerr studied at University of Holm.")["university"]
    'University of Holm'
    """
    parts = re.split(r"\{(\w+)\}", FACTS[fact])
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(re.escape(part))
        else:
            out.append(f"(?P<{part}>[^.]+?)" if part == field else "[^.]+?")
    return re.compile("".join(out))


def normalize(text: str | None) -> str:
    """Lower case, punctuation and thousands separators dropped, no leading article.

    >>> normalize("  The Ostva River. "), normalize("564,000"), normalize(None)
    ('ostva river', '564000', '')
    """
    words = re.sub(r"[^\w\s]", "", (text or "").lower()).split()
    if words and words[0] in ("the", "a", "an"):
        words = words[1:]
    return " ".join(words)


def make_tasks(world: World, split: str, count: int, seed: int, min_hops: int, max_hops: int) -> list[Task]:
    """`count` questions; question i depends only on (world, seed, split, i, hop range)."""
    subjects: dict[str, list[Entity]] = {}
    for t in TEMPLATES:
        kinds = set(t.subject)
        subjects[t.name] = [
            e for _, e in sorted(world.entities.items()) if e.kind in kinds and resolve(world, t, e) is not None
        ]
    tasks = []
    for i in range(count):
        rng = random.Random(f"wiki_search:{seed}:{split}:{i}")
        hops = rng.randint(min_hops, max_hops)
        template = rng.choice([t for t in TEMPLATES if t.hops == hops and subjects[t.name]])
        subject = rng.choice(subjects[template.name])
        answer, chain = resolve(world, template, subject)  # type: ignore[misc]
        tasks.append(
            Task(
                id=f"{split}-{i}",
                question=template.text.format(s=subject.name),
                answer=answer,
                info={"hops": hops, "template": template.name, "chain": chain},
                seed=rng.getrandbits(31),
            )
        )
    return tasks


def parse_question(question: str) -> tuple[Template, str] | None:
    """The template and subject of a question text (what a scripted player can read).

    >>> t, s = parse_question("In which city was the creator of The Quiet Gate born?")
    >>> t.name, s
    ('creator_city', 'The Quiet Gate')
    """
    for t in sorted(TEMPLATES, key=lambda t: -len(t.text)):
        head, _, tail = t.text.partition("{s}")
        if question.startswith(head) and question.endswith(tail) and len(question) > len(head) + len(tail):
            return t, question[len(head) : len(question) - len(tail)]
    return None
