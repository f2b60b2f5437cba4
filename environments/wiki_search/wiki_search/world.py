"""A fictional but consistent world, generated from a seed, and its encyclopedia articles.

Countries have cities, rivers and mountains; people are born in cities, study at universities,
learn from mentors and create works; universities and companies are founded by people in
cities. Every name is unique, every relation is a function (one birth city, one founder...),
and dates agree with each other (a founder is born before the founding, a work is made during
its creator's life), so a question built from the relations has exactly one answer.

Facts appear in the articles as fixed sentences (`FACTS`); filler sentences around them mention
other entities without stating facts. Same seed and size, same world, always.
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

FACTS = {
    "born": "{name} was born in {year} in the city of {city}.",
    "studied": "{name} studied at {university}.",
    "mentor": "{name} was a student of {mentor}.",
    "died": "{name} died in {year}.",
    "city_country": "{city} is a city in {country}, with a population of {population}.",
    "river": "{city} lies on the {river}.",
    "city_founded": "{city} was founded in {year}.",
    "mayor": "The current mayor of {city} is {mayor}.",
    "capital": "{country} is a country whose capital is {capital}.",
    "currency": "The currency of {country} is the {currency}.",
    "language": "The official language of {country} is {language}.",
    "org_based": "{org} is a {kind} based in {city}.",
    "org_founded": "{org} was founded in {year} by {founder}.",
    "work": "{title} is a {kind} by {creator}, completed in {year}.",
    "height": "{mountain} is a mountain in {country}. It rises to a height of {height} metres.",
    "river_country": "The {river} flows through {country} for {length} kilometres.",
}
"""The sentences that state facts. Reference players parse these (and only these)."""


@dataclass
class Section:
    id: str
    heading: str
    body: str


@dataclass
class Page:
    id: str
    title: str
    kind: str
    sections: list[Section] = field(default_factory=list)

    def add(self, heading: str, *sentences: str) -> None:
        sid = f"{self.id}:{slug(heading)}"
        self.sections.append(Section(sid, heading, " ".join(s for s in sentences if s)))


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


class _Pick:
    """Random picks for filler text, from the rendering rng."""

    def __init__(self, rng: random.Random, places: list[str], people: list[str]) -> None:
        self.rng, self._places, self._people = rng, places, people

    def place(self) -> str:
        return self.rng.choice(self._places)

    def person(self) -> str:
        return self.rng.choice(self._people)

    def filler(self, templates: list[str], count: int, **fields: object) -> list[str]:
        return [t.format(**fields) for t in self.rng.sample(templates, count)]


def slug(text: str) -> str:
    """A lower-case id: `slug("Mount Keldor")` -> `'mount_keldor'`."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


class World:
    """All entities of one seed and size; `pages()` renders the articles."""

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
        self._organisations(n, cities, people)
        self._works(n, people)

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

    # ---- articles -----------------------------------------------------------------------

    def pages(self) -> list[Page]:
        """Every article, in a stable order (its own rng: rendering never changes the world)."""
        rng = random.Random(f"wiki_search:{self.seed}:{self.size}:text")
        names = sorted(self.entities)
        back: dict[tuple[str, str], list[str]] = {}
        for e in self.entities.values():
            for rel, target in e.links.items():
                back.setdefault((target, rel), []).append(e.name)
        render = {
            "country": self._country,
            "city": self._city,
            "river": self._river,
            "mountain": self._mountain,
            "person": self._person,
            "university": self._org,
            "company": self._org,
            "work": self._work,
        }
        places = sorted(e.name for e in self.entities.values() if e.kind in ("city", "country"))
        people = sorted(e.name for e in self.entities.values() if e.kind == "person")
        out = []
        for name in names:
            e = self.entities[name]
            page = Page(slug(name), name, e.kind)
            render[e.kind](page, e, back, _Pick(rng, places, people))
            out.append(page)
        return out

    def _person(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
        first = e.name.split()[0]
        life = f"{e.year}–{e.numbers['died']}" if "died" in e.numbers else f"born {e.year}"
        page.add(
            "Overview",
            f"{e.name} ({life}) was a {e.extra['occupation']}.",
            *pick.filler(
                [
                    "{first} is often mentioned alongside {p}.",
                    "Historians still debate the influence of {first} on {p}.",
                    "{first} appears in the letters of {p}.",
                ],
                1,
                first=first,
                p=pick.person(),
            ),
        )
        page.add(
            "Early life",
            FACTS["born"].format(name=e.name, year=e.year, city=e.links["birth_city"]),
            *pick.filler(
                [
                    "As a child, {first} often visited {a}.",
                    "{first} learned to read from an aunt who admired {p}.",
                    "Little is recorded of {first}'s parents.",
                ],
                2,
                first=first,
                a=pick.place(),
                p=pick.person(),
            ),
        )
        education = [
            FACTS["studied"].format(name=e.name, university=e.links["university"])
            if "university" in e.links
            else f"{e.name} was educated at home."
        ]
        if "mentor" in e.links:
            education.append(FACTS["mentor"].format(name=e.name, mentor=e.links["mentor"]))
        page.add("Education", *education)
        works = back.get((e.name, "creator"), [])
        career = [f"{first} worked as a {e.extra['occupation']} for most of their life."]
        if works:
            listed = sorted(works, key=lambda w: self.entities[w].year)[:4]
            career.append(
                "Works by " + first + " include " + "; ".join(f"{w} ({self.entities[w].year})" for w in listed) + "."
            )
        if "mayor_of" in e.extra:
            career.append(f"{first} later entered local politics.")
        page.add("Career", *career)
        page.add(
            "Later life",
            FACTS["died"].format(name=e.name, year=e.numbers["died"])
            if "died" in e.numbers
            else f"{first} is still living.",
            f"{first} spent some years in {pick.place()}.",
        )

    def _city(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
        page.add(
            "Overview",
            FACTS["city_country"].format(
                city=e.name, country=e.links["country"], population=f"{e.numbers['population']:,}"
            ),
        )
        page.add(
            "Geography",
            FACTS["river"].format(city=e.name, river=e.links["river"]),
            *pick.filler(
                ["The surrounding hills are known for their {n}s.", "Travellers from {a} often pass through the city."],
                1,
                n=pick.rng.choice(NOUNS),
                a=pick.place(),
            ),
        )
        founded = back.get((e.name, "city"), [])
        page.add(
            "History",
            FACTS["city_founded"].format(city=e.name, year=e.year),
            *(f"{o} has been based in the city since {self.entities[o].year}." for o in sorted(founded)[:3]),
        )
        if "mayor" in e.links:
            page.add("Government", FACTS["mayor"].format(city=e.name, mayor=e.links["mayor"]))

    def _country(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
        cities = sorted(c for c in back.get((e.name, "country"), []) if self.entities[c].kind == "city")
        page.add(
            "Overview",
            FACTS["capital"].format(country=e.name, capital=e.links["capital"]),
            f"The state was established in {e.year}.",
        )
        page.add(
            "Economy",
            FACTS["currency"].format(country=e.name, currency=e.extra["currency"]),
            f"Trade with {pick.place()} has long shaped the economy.",
        )
        page.add("Culture", FACTS["language"].format(country=e.name, language=e.extra["language"]))
        page.add("Geography", "Cities in the country include " + ", ".join(cities[:12]) + ".")

    def _river(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
        page.add(
            "Overview",
            FACTS["river_country"].format(river=e.name, country=e.links["country"], length=e.numbers["length"]),
        )
        on = sorted(back.get((e.name, "river"), []))
        page.add(
            "Course",
            ("Cities on its banks include " + ", ".join(on) + ".") if on else "No large city lies on its banks.",
        )

    def _mountain(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
        page.add(
            "Overview", FACTS["height"].format(mountain=e.name, country=e.links["country"], height=e.numbers["height"])
        )
        page.add("Climbing", f"The first recorded ascent was made by a party from {pick.place()}.")

    def _org(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
        kind = "university" if e.kind == "university" else f"company in the {e.extra['industry']} industry"
        page.add("Overview", FACTS["org_based"].format(org=e.name, kind=kind, city=e.links["city"]))
        page.add(
            "History",
            FACTS["org_founded"].format(org=e.name, year=e.year, founder=e.links["founder"]),
            f"Early support came from merchants in {pick.place()}.",
        )
        alumni = sorted(back.get((e.name, "university"), []))
        if alumni:
            page.add("Alumni", "Alumni include " + ", ".join(alumni[:6]) + ".")

    def _work(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
        page.add(
            "Overview",
            FACTS["work"].format(title=e.name, kind=e.extra["kind"], creator=e.links["creator"], year=e.year),
        )
        page.add(
            "Reception",
            *pick.filler(
                ["Critics in {a} praised it.", "It was long out of print.", "It influenced a young {o} from {a}."],
                2,
                a=pick.place(),
                o=pick.rng.choice(OCCUPATIONS),
            ),
        )


def _article(noun: str) -> str:
    """`noun` with its indefinite article: `_article("Echo")` -> `'An Echo'`."""
    return ("An " if noun[0] in "AEIOU" else "A ") + noun
