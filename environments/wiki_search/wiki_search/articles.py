"""The encyclopedia articles of a `World`: one page per entity, in sections.

Facts appear as fixed sentences (`FACTS`, the only ones reference players parse); filler
sentences around them mention other entities without stating facts. Rendering has its own rng,
so the same world always gives the same text, and rendering never changes the world.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from wiki_search.words import NOUNS, OCCUPATIONS
from wiki_search.world import Entity, World, slug

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


def pages(world: World) -> list[Page]:
    """Every article of `world`, in a stable order (its own rng: rendering never changes the
    world)."""
    rng = random.Random(f"wiki_search:{world.seed}:{world.size}:text")
    back: dict[tuple[str, str], list[str]] = {}
    for e in world.entities.values():
        for rel, target in e.links.items():
            back.setdefault((target, rel), []).append(e.name)
    writer = _Writer(world.entities)
    render = {
        "country": writer.country,
        "city": writer.city,
        "river": writer.river,
        "mountain": writer.mountain,
        "person": writer.person,
        "university": writer.org,
        "company": writer.org,
        "work": writer.work,
    }
    places = sorted(e.name for e in world.entities.values() if e.kind in ("city", "country"))
    people = sorted(e.name for e in world.entities.values() if e.kind == "person")
    out = []
    for name in sorted(world.entities):
        e = world.entities[name]
        page = Page(slug(name), name, e.kind)
        render[e.kind](page, e, back, _Pick(rng, places, people))
        out.append(page)
    return out


class _Writer:
    """The article of each kind of entity: its sections, fact sentences and filler."""

    def __init__(self, entities: dict[str, Entity]) -> None:
        self.entities = entities

    def person(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
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

    def city(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
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

    def country(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
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

    def river(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
        page.add(
            "Overview",
            FACTS["river_country"].format(river=e.name, country=e.links["country"], length=e.numbers["length"]),
        )
        on = sorted(back.get((e.name, "river"), []))
        page.add(
            "Course",
            ("Cities on its banks include " + ", ".join(on) + ".") if on else "No large city lies on its banks.",
        )

    def mountain(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
        page.add(
            "Overview", FACTS["height"].format(mountain=e.name, country=e.links["country"], height=e.numbers["height"])
        )
        page.add("Climbing", f"The first recorded ascent was made by a party from {pick.place()}.")

    def org(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
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

    def work(self, page: Page, e: Entity, back: dict, pick: _Pick) -> None:
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
