"""A fictional but consistent world, generated from a seed, and its encyclopedia articles.

Countries have cities, rivers and mountains; people are born in cities, study at universities,
learn from mentors and create works; universities and companies are founded by people in
cities. Every name is unique, every relation is a function (one birth city, one founder...),
and dates agree with each other (a founder is born before the founding, a work is made during
its creator's life), so a question built from the relations has exactly one answer.

The articles are written by `wiki_search.articles` (`pages(world)`). Same seed and size, same
world, always.
"""

from __future__ import annotations

import bisect
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from wiki_search.words import (
    ADJECTIVES,
    CODAS,
    COUNTRY_ENDS,
    FIRST_ENDS,
    INDUSTRIES,
    LAST_ENDS,
    NOUNS,
    OCCUPATION_WORKS,
    OCCUPATIONS,
    ONSETS,
    PLACE_ENDS,
    UNITS,
    VOWELS,
)

GENERATOR_VERSION = 1
"""Bump whenever the generated world or its text changes: cached indexes are keyed by it."""

SIZES: dict[str, dict[str, int]] = {
    "full": {
        "countries": 16,
        "cities": 12,
        "rivers": 48,
        "mountains": 48,
        "people": 1500,
        "universities": 96,
        "companies": 192,
        "works": 900,
    },
    "small": {
        "countries": 4,
        "cities": 5,
        "rivers": 8,
        "mountains": 8,
        "people": 150,
        "universities": 10,
        "companies": 15,
        "works": 80,
    },
}
"""Entity counts per size (`cities` is per country). `full` makes 2,992 articles."""


@dataclass
class Entity:
    """One article's subject. `links` holds the relations (name of the related entity)."""

    name: str
    kind: str
    year: int = 0
    """Birth year (people), founding year (cities, countries, organisations), year made (works)."""
    links: dict[str, str] = field(default_factory=dict)
    numbers: dict[str, int] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)


def slug(text: str) -> str:
    """A lower-case id: `slug("Mount Keldor")` -> `'mount_keldor'`."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


class World:
    """All entities of one seed and size (`wiki_search.articles.pages` renders their articles)."""

    def __init__(self, seed: int = 0, size: str = "full") -> None:
        if size not in SIZES:
            raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
        self.seed, self.size = seed, size
        self.rng = random.Random(f"wiki_search:{seed}:{size}:v{GENERATOR_VERSION}")
        self.entities: dict[str, Entity] = {}
        self._used: set[str] = set()
        self._build(SIZES[size])

    # ---- names --------------------------------------------------------------------------

    def _word(self, syllables: int, ends: list[str]) -> str:
        rng = self.rng
        text = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(syllables))
        return (text + rng.choice(ends)).capitalize()

    def _unique(self, make: Callable[[], str]) -> str:
        while True:
            name = make()
            if slug(name) not in self._used and len(name) > 3 and not re.search("[aeiouy]{3}", name.lower()):
                self._used.add(slug(name))
                return name

    def _add(self, entity: Entity) -> Entity:
        self.entities[entity.name] = entity
        return entity

    def of_kind(self, kind: str) -> list[Entity]:
        return [e for e in self.entities.values() if e.kind == kind]

    # ---- entities -----------------------------------------------------------------------

    def _build(self, n: dict[str, int]) -> None:
        rng = self.rng
        countries = [
            self._add(Entity(self._unique(lambda: self._word(2, COUNTRY_ENDS)), "country", rng.randint(1200, 1900)))
            for _ in range(n["countries"])
        ]
        for country in countries:
            stem = self._word(1, ["", "an", "el"])
            country.extra["currency"] = f"{stem} {rng.choice(UNITS)}"
            country.extra["language"] = stem + rng.choice(["ish", "ese", "ic", "i"])
        rivers = [
            self._add(
                Entity(
                    self._unique(lambda: self._word(2, [""]) + " River"),
                    "river",
                    links={"country": rng.choice(countries).name},
                    numbers={"length": rng.randint(40, 2400)},
                )
            )
            for _ in range(n["rivers"])
        ]
        for c in countries:  # every country has a river of its own
            if not any(r.links["country"] == c.name for r in rivers):
                rng.choice(rivers).links["country"] = c.name
        for _ in range(n["mountains"]):
            self._add(
                Entity(
                    self._unique(lambda: "Mount " + self._word(2, [""])),
                    "mountain",
                    links={"country": rng.choice(countries).name},
                    numbers={"height": rng.randint(900, 8200)},
                )
            )
        cities = []
        for country in countries:
            own_rivers = [r for r in rivers if r.links["country"] == country.name] or rivers
            for i in range(n["cities"]):
                city = self._add(
                    Entity(
                        self._unique(lambda: self._word(2, PLACE_ENDS)),
                        "city",
                        rng.randint(600, 1700),
                        links={"country": country.name, "river": rng.choice(own_rivers).name},
                        numbers={"population": rng.randint(4, 3000) * 1000},
                    )
                )
                if i == 0:
                    country.links["capital"] = city.name
                cities.append(city)
        people = self._people(n, cities)
        self._organisations(n, cities, people)
        self._works(n, people)

    def _people(self, n: dict[str, int], cities: list[Entity]) -> list[Entity]:
        """People born in the cities, their mentors (15-45 years older) and the cities' mayors."""
        rng = self.rng
        people = []
        for _ in range(n["people"]):
            year = rng.randint(1740, 1995)
            died = year + rng.randint(45, 95)
            person = self._add(
                Entity(
                    self._unique(lambda: f"{self._word(2, FIRST_ENDS)} {self._word(2, LAST_ENDS)}"),
                    "person",
                    year,
                    links={"birth_city": rng.choice(cities).name},
                    extra={"occupation": rng.choice(OCCUPATIONS)},
                )
            )
            if died <= 2024:
                person.numbers["died"] = died
            people.append(person)
        by_year = sorted(people, key=lambda p: p.year)
        years = [p.year for p in by_year]
        for person in people:  # a mentor is 15-45 years older
            older = by_year[bisect.bisect_left(years, person.year - 45) : bisect.bisect_right(years, person.year - 15)]
            if older and rng.random() < 0.85:
                person.links["mentor"] = rng.choice(older).name
        for city in cities:  # mayors: living people, born 1940-1990
            candidates = [
                p for p in people if 1940 <= p.year <= 1990 and "died" not in p.numbers and not p.extra.get("mayor_of")
            ]
            if candidates:
                mayor = rng.choice(candidates)
                mayor.extra["mayor_of"] = city.name
                city.links["mayor"] = mayor.name
        return people

    def _organisations(self, n: dict[str, int], cities: list[Entity], people: list[Entity]) -> None:
        rng = self.rng
        founders = [p for p in people if p.year <= 1980]
        for city in rng.sample(cities, n["universities"]):
            founder = rng.choice(founders)
            self._add(
                Entity(
                    self._unique(lambda c=city: f"University of {c.name}"),
                    "university",
                    min(founder.year + rng.randint(28, 60), 2015),
                    links={"city": city.name, "founder": founder.name},
                )
            )
        for _ in range(n["companies"]):
            founder = rng.choice(founders)
            suffix = rng.choice(sorted(INDUSTRIES))
            self._add(
                Entity(
                    self._unique(lambda s=suffix: f"{self._word(2, [''])} {s}"),
                    "company",
                    min(founder.year + rng.randint(24, 55), 2020),
                    links={"city": rng.choice(cities).name, "founder": founder.name},
                    extra={"industry": INDUSTRIES[suffix]},
                )
            )
        universities = self.of_kind("university")
        for person in people:  # studied at a university that existed when they were 18
            open_then = [u for u in universities if u.year <= person.year + 18]
            if open_then and rng.random() < 0.9:
                person.links["university"] = rng.choice(open_then).name

    def _works(self, n: dict[str, int], people: list[Entity]) -> None:
        rng = self.rng
        creators = [p for p in people if p.extra["occupation"] in OCCUPATION_WORKS and p.year <= 1995]
        patterns = [
            lambda: f"The {rng.choice(ADJECTIVES).title()} {rng.choice(NOUNS).title()}",
            lambda: f"{rng.choice(NOUNS).title()} of {self._word(2, PLACE_ENDS)}",
            lambda: f"{rng.choice(ADJECTIVES).title()} {rng.choice(NOUNS).title()}s",
            lambda: _article(rng.choice(NOUNS).title()) + f" for {self._word(2, FIRST_ENDS)}",
        ]
        for _ in range(n["works"]):
            creator = rng.choice(creators)
            last = min(creator.numbers.get("died", 2023), 2023)
            self._add(
                Entity(
                    self._unique(lambda: rng.choice(patterns)()),
                    "work",
                    rng.randint(creator.year + 18, max(creator.year + 18, last)),
                    links={"creator": creator.name},
                    extra={"kind": OCCUPATION_WORKS[creator.extra["occupation"]]},
                )
            )


def _article(noun: str) -> str:
    """`noun` with its indefinite article: `_article("Echo")` -> `'An Echo'`."""
    return ("An " if noun[0] in "AEIOU" else "A ") + noun
