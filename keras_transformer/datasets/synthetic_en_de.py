"""A synthetic English→German corpus: the quickstart recipe's default data.

Every pair is composed by this module from templates and a small bilingual
lexicon written for it; no sentence is copied from anywhere. The corpus is
regular enough for a small Transformer to learn on a CPU in minutes, yet it
needs what makes translation more than word substitution:

* ``numbers``: cardinals 0-9999 as words ("twenty-one" → "einundzwanzig"),
  counted nouns with singular/plural and accusative agreement, prices, ages,
  arithmetic.
* ``dates``: ordinals with German case endings ("on the third of May" →
  "am dritten Mai", "Today is the third of May." → "Heute ist der dritte
  Mai."), weekdays, months, only valid day/month combinations.
* ``times``: clock times ("half past seven" → "halb acht", "quarter to four"
  → "Viertel vor vier", "14:05" → "vierzehn Uhr fünf").
* ``modal_verbs``, ``perfect_tense``: the non-finite verb goes to the end of
  the German clause ("I want to buy the red car." → "Ich will das rote Auto
  kaufen.").
* ``separable_verbs``: "The train arrives at eight." → "Der Zug kommt um acht
  an."
* ``inversion``: verb second after a fronted time expression ("Tomorrow I buy
  bread." → "Morgen kaufe ich Brot.").
* ``subordinate_clauses``: verb-final clauses after "dass", "weil", "wenn",
  and verb-first main clauses after a fronted "wenn" clause.
* ``noun_phrases``: articles, possessives and adjective endings by gender,
  number and case (nominative, accusative), verb conjugation by person.

Conventions, chosen once and kept everywhere so that every English sentence
has exactly one German translation:

* English numbers are British: "one hundred and two", "two thousand and
  five"; German writes "einhundert", "eintausend" (never bare "hundert").
* English "you" is always "du"; "they" is "sie" (plural verb).
* German numbers are written as words, never digits; English clock times may
  be digits ("14:05"), read in German as "vierzehn Uhr fünf".
* An English sentence with a time adverbial in the past uses the simple past
  ("Yesterday I bought the car."), without one the present perfect ("I have
  bought the car."); both become the German Perfekt.

Usage::

    from keras_transformer.datasets import synthetic_en_de as syn
    train, test = syn.make_splits(30_000, 1_000, seed=0)
    syn.write_jsonl("train.jsonl.gz", train)

or ``python -m keras_transformer.datasets.synthetic_en_de --out DIR``.

Pure Python; no TensorFlow or Keras needed.
"""

import argparse
import dataclasses
import functools
import os
import random

__all__ = [
    "CATEGORIES",
    "DEFAULT_WEIGHTS",
    "Clause",
    "Example",
    "Phrase",
    "TimeAdverb",
    "VERBS",
    "analog_time",
    "clock_adverb",
    "date_adverb",
    "date_phrase",
    "digital_time",
    "english_cardinal",
    "english_ordinal",
    "generate_examples",
    "generate_pairs",
    "german_cardinal",
    "german_ordinal",
    "make_splits",
    "noun_phrase",
    "pronoun",
    "simple_sentence",
    "subordinate_sentence",
    "time_adverb",
    "write_jsonl",
]

CATEGORIES = (
    "numbers",
    "dates",
    "times",
    "modal_verbs",
    "perfect_tense",
    "separable_verbs",
    "inversion",
    "subordinate_clauses",
    "noun_phrases",
)

# Relative sampling weights of the categories when all are requested.
DEFAULT_WEIGHTS = {
    "numbers": 0.16,
    "dates": 0.12,
    "times": 0.12,
    "modal_verbs": 0.10,
    "perfect_tense": 0.10,
    "separable_verbs": 0.10,
    "inversion": 0.10,
    "subordinate_clauses": 0.10,
    "noun_phrases": 0.10,
}

# Longer sentences are redrawn: the corpus is meant for a tiny model.
MAX_ENGLISH_WORDS = 16


def _check_int(value, low, high, name):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


def _capitalise(text):
    return text[:1].upper() + text[1:]


# --------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------

_EN_SMALL = (
    "zero one two three four five six seven eight nine ten eleven twelve "
    "thirteen fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_EN_TENS = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty",
            7: "seventy", 8: "eighty", 9: "ninety"}

_DE_UNITS = "null eins zwei drei vier fünf sechs sieben acht neun".split()
_DE_TEENS = {10: "zehn", 11: "elf", 12: "zwölf", 13: "dreizehn",
             14: "vierzehn", 15: "fünfzehn", 16: "sechzehn", 17: "siebzehn",
             18: "achtzehn", 19: "neunzehn"}
_DE_TENS = {2: "zwanzig", 3: "dreißig", 4: "vierzig", 5: "fünfzig",
            6: "sechzig", 7: "siebzig", 8: "achtzig", 9: "neunzig"}


def _english_below_100(n):
    if n < 20:
        return _EN_SMALL[n]
    tens, unit = divmod(n, 10)
    return _EN_TENS[tens] + (f"-{_EN_SMALL[unit]}" if unit else "")


def english_cardinal(n):
    """0-9999 in British English words: "two thousand three hundred and forty-four"."""
    _check_int(n, 0, 9999, "n")
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    hundreds, rest = divmod(rest, 100)
    words = []
    if thousands:
        words.append(f"{_EN_SMALL[thousands]} thousand")
    if hundreds:
        words.append(f"{_EN_SMALL[hundreds]} hundred")
    if rest:
        if words:
            words.append("and")
        words.append(_english_below_100(rest))
    return " ".join(words)


def _german_below_100(n):
    if n < 10:
        return _DE_UNITS[n]
    if n < 20:
        return _DE_TEENS[n]
    tens, unit = divmod(n, 10)
    if not unit:
        return _DE_TENS[tens]
    # Inside a compound "eins" loses its s: einundzwanzig.
    unit_word = "ein" if unit == 1 else _DE_UNITS[unit]
    return f"{unit_word}und{_DE_TENS[tens]}"


def german_cardinal(n):
    """0-9999 as one German word: 21 einundzwanzig, 101 einhunderteins.

    The convention is "einhundert"/"eintausend" (not bare "hundert"); a
    final 1 is "eins" (einhunderteins), a 1 before "hundert", "tausend" or
    "und" is "ein".
    """
    _check_int(n, 0, 9999, "n")
    if n == 0:
        return "null"
    thousands, rest = divmod(n, 1000)
    hundreds, rest = divmod(rest, 100)
    parts = []
    if thousands:
        parts.append(("ein" if thousands == 1 else _DE_UNITS[thousands]) + "tausend")
    if hundreds:
        parts.append(("ein" if hundreds == 1 else _DE_UNITS[hundreds]) + "hundert")
    if rest:
        parts.append(_german_below_100(rest))
    return "".join(parts)


_EN_ORDINAL_IRREGULAR = {1: "first", 2: "second", 3: "third", 5: "fifth",
                         8: "eighth", 9: "ninth", 12: "twelfth"}


def english_ordinal(n):
    """1-31: "first", "twenty-second", "thirtieth"."""
    _check_int(n, 1, 31, "n")
    if n in _EN_ORDINAL_IRREGULAR:
        return _EN_ORDINAL_IRREGULAR[n]
    if n < 20:
        return _EN_SMALL[n] + "th"
    tens, unit = divmod(n, 10)
    if not unit:
        return _EN_TENS[tens][:-1] + "ieth"
    return f"{_EN_TENS[tens]}-{english_ordinal(unit)}"


_DE_ORDINAL_IRREGULAR = {1: "erst", 3: "dritt", 7: "siebt", 8: "acht"}
_DE_CASE_ENDINGS = {"nominative": "e", "dative": "en"}


def german_ordinal(n, case="nominative"):
    """1-31 with the weak ending after a definite article.

    "nominative" (der dritte Mai) ends in -e, "dative" (am dritten Mai) in
    -en. Up to 19 the stem adds -t (zweit-, neunzehnt-), from 20 on -st
    (zwanzigst-, einunddreißigst-); erst-, dritt-, siebt-, acht- are
    irregular.
    """
    _check_int(n, 1, 31, "n")
    if case not in _DE_CASE_ENDINGS:
        raise ValueError(f"case must be 'nominative' or 'dative', got {case!r}")
    if n in _DE_ORDINAL_IRREGULAR:
        stem = _DE_ORDINAL_IRREGULAR[n]
    elif n < 20:
        stem = german_cardinal(n) + "t"
    else:
        stem = german_cardinal(n) + "st"
    return stem + _DE_CASE_ENDINGS[case]


# --------------------------------------------------------------------------
# Dates and times
# --------------------------------------------------------------------------

MONTHS = (  # (English, German, days; February allows the 29th)
    ("January", "Januar", 31), ("February", "Februar", 29),
    ("March", "März", 31), ("April", "April", 30), ("May", "Mai", 31),
    ("June", "Juni", 30), ("July", "Juli", 31), ("August", "August", 31),
    ("September", "September", 30), ("October", "Oktober", 31),
    ("November", "November", 30), ("December", "Dezember", 31),
)
WEEKDAYS = (
    ("Monday", "Montag"), ("Tuesday", "Dienstag"), ("Wednesday", "Mittwoch"),
    ("Thursday", "Donnerstag"), ("Friday", "Freitag"), ("Saturday", "Samstag"),
    ("Sunday", "Sonntag"),
)


def date_phrase(day, month, *, style="of", case="nominative"):
    """A date as (English, German) noun phrases, without a preposition.

    style "of": "the third of May"; style "month_day": "May 3". German is
    always words with the article in `case`: "der dritte Mai" (nominative)
    or "dem dritten Mai" (dative). Invalid dates (30 February) raise.
    """
    _check_int(month, 1, 12, "month")
    en_month, de_month, days = MONTHS[month - 1]
    _check_int(day, 1, days, f"day (of {en_month})")
    if style == "of":
        english = f"the {english_ordinal(day)} of {en_month}"
    elif style == "month_day":
        english = f"{en_month} {day}"
    else:
        raise ValueError(f"style must be 'of' or 'month_day', got {style!r}")
    article = {"nominative": "der", "dative": "dem"}.get(case)
    if article is None:
        raise ValueError(f"case must be 'nominative' or 'dative', got {case!r}")
    return english, f"{article} {german_ordinal(day, case)} {de_month}"


ANALOG_MINUTES = (0, 5, 10, 15, 20, 30, 40, 45, 50, 55)


def analog_time(hour, minute, *, oclock=True):
    """A 12-hour spoken clock time as (English, German).

    minute is one of ANALOG_MINUTES. 7:30 is "half past seven" / "halb acht"
    (German counts towards the next hour), 3:15 "quarter past three" /
    "Viertel nach drei", 3:45 "quarter to four" / "Viertel vor vier". Full
    hours are "seven o'clock" / "sieben Uhr" ("ein Uhr" for one), or with
    oclock=False just "seven" / "sieben" ("eins").
    """
    _check_int(hour, 1, 12, "hour")
    if minute not in ANALOG_MINUTES:
        raise ValueError(f"minute must be one of {ANALOG_MINUTES}, got {minute!r}")
    next_hour = hour % 12 + 1
    en_hour, en_next = _EN_SMALL[hour], _EN_SMALL[next_hour]
    # A bare hour counts ("um eins"); only "ein Uhr" drops the s.
    de_hour, de_next = german_cardinal(hour), german_cardinal(next_hour)
    if minute == 0:
        if oclock:
            return f"{en_hour} o'clock", ("ein" if hour == 1 else de_hour) + " Uhr"
        return en_hour, de_hour
    if minute == 15:
        return f"quarter past {en_hour}", f"Viertel nach {de_hour}"
    if minute == 30:
        return f"half past {en_hour}", f"halb {de_next}"
    if minute == 45:
        return f"quarter to {en_next}", f"Viertel vor {de_next}"
    if minute < 30:
        return (f"{english_cardinal(minute)} past {en_hour}",
                f"{german_cardinal(minute)} nach {de_hour}")
    return (f"{english_cardinal(60 - minute)} to {en_next}",
            f"{german_cardinal(60 - minute)} vor {de_next}")


def digital_time(hour, minute):
    """A 24-hour time: (“14:05”, “vierzehn Uhr fünf”); 1:00 is “ein Uhr”."""
    _check_int(hour, 0, 23, "hour")
    _check_int(minute, 0, 59, "minute")
    german = ("ein" if hour == 1 else german_cardinal(hour)) + " Uhr"
    if minute:
        german += " " + german_cardinal(minute)
    return f"{hour}:{minute:02d}", german


# --------------------------------------------------------------------------
# Lexicon
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Noun:
    en: str
    en_plural: str | None  # None: mass noun (bread), no "a", no counting
    de: str
    de_plural: str | None
    gender: str  # "m", "f", "n"
    kinds: frozenset
    adjectives: str  # key into ADJECTIVE_SETS
    de_accusative: str | None = None  # weak masculines: den Nachbarn

    @property
    def countable(self):
        return self.en_plural is not None


def _noun(en, en_plural, de, de_plural, gender, kinds, adjectives, acc=None):
    return Noun(en, en_plural, de, de_plural, gender, frozenset(kinds.split()),
                adjectives, acc)


NOUNS = {n.en: n for n in (
    # things
    _noun("car", "cars", "Auto", "Autos", "n", "thing", "thing"),
    _noun("book", "books", "Buch", "Bücher", "n", "thing readable writable", "thing"),
    _noun("letter", "letters", "Brief", "Briefe", "m", "thing readable writable", "thing"),
    _noun("newspaper", "newspapers", "Zeitung", "Zeitungen", "f", "thing readable", "thing"),
    _noun("postcard", "postcards", "Postkarte", "Postkarten", "f", "thing readable writable", "thing"),
    _noun("table", "tables", "Tisch", "Tische", "m", "thing", "thing"),
    _noun("chair", "chairs", "Stuhl", "Stühle", "m", "thing", "thing"),
    _noun("lamp", "lamps", "Lampe", "Lampen", "f", "thing", "thing"),
    _noun("bag", "bags", "Tasche", "Taschen", "f", "thing openable", "thing"),
    _noun("clock", "clocks", "Uhr", "Uhren", "f", "thing", "thing"),
    _noun("bicycle", "bicycles", "Fahrrad", "Fahrräder", "n", "thing", "thing"),
    _noun("computer", "computers", "Computer", "Computer", "m", "thing", "thing"),
    _noun("key", "keys", "Schlüssel", "Schlüssel", "m", "thing", "thing"),
    _noun("cup", "cups", "Tasse", "Tassen", "f", "thing", "thing"),
    _noun("glass", "glasses", "Glas", "Gläser", "n", "thing", "thing"),
    _noun("bottle", "bottles", "Flasche", "Flaschen", "f", "thing openable", "thing"),
    _noun("plate", "plates", "Teller", "Teller", "m", "thing", "thing"),
    _noun("picture", "pictures", "Bild", "Bilder", "n", "thing", "thing"),
    _noun("hat", "hats", "Hut", "Hüte", "m", "thing", "thing"),
    _noun("coat", "coats", "Mantel", "Mäntel", "m", "thing", "thing"),
    _noun("jacket", "jackets", "Jacke", "Jacken", "f", "thing", "thing"),
    _noun("dress", "dresses", "Kleid", "Kleider", "n", "thing", "thing"),
    _noun("shoe", "shoes", "Schuh", "Schuhe", "m", "thing", "thing"),
    _noun("ball", "balls", "Ball", "Bälle", "m", "thing", "thing"),
    _noun("pen", "pens", "Stift", "Stifte", "m", "thing", "thing"),
    _noun("house", "houses", "Haus", "Häuser", "n", "thing", "thing"),
    _noun("flower", "flowers", "Blume", "Blumen", "f", "thing", "thing"),
    _noun("box", "boxes", "Kiste", "Kisten", "f", "thing openable", "thing"),
    _noun("umbrella", "umbrellas", "Regenschirm", "Regenschirme", "m", "thing", "thing"),
    _noun("ticket", "tickets", "Fahrkarte", "Fahrkarten", "f", "thing", "thing"),
    _noun("guitar", "guitars", "Gitarre", "Gitarren", "f", "thing", "thing"),
    # rooms and furniture one tidies up
    _noun("room", "rooms", "Zimmer", "Zimmer", "n", "tidyable", "place"),
    _noun("kitchen", "kitchens", "Küche", "Küchen", "f", "tidyable", "place"),
    _noun("garage", "garages", "Garage", "Garagen", "f", "tidyable openable", "place"),
    _noun("cupboard", "cupboards", "Schrank", "Schränke", "m", "tidyable openable", "place"),
    _noun("desk", "desks", "Schreibtisch", "Schreibtische", "m", "tidyable", "place"),
    _noun("door", "doors", "Tür", "Türen", "f", "openable", "place"),
    _noun("window", "windows", "Fenster", "Fenster", "n", "openable", "place"),
    # animals
    _noun("dog", "dogs", "Hund", "Hunde", "m", "animal", "animal"),
    _noun("cat", "cats", "Katze", "Katzen", "f", "animal", "animal"),
    _noun("horse", "horses", "Pferd", "Pferde", "n", "animal", "animal"),
    _noun("bird", "birds", "Vogel", "Vögel", "m", "animal", "animal"),
    _noun("mouse", "mice", "Maus", "Mäuse", "f", "animal", "animal"),
    # food and drink; bread, cheese, soup, milk, ... are mass nouns
    _noun("apple", "apples", "Apfel", "Äpfel", "m", "food", "food"),
    _noun("egg", "eggs", "Ei", "Eier", "n", "food cookable", "food"),
    _noun("potato", "potatoes", "Kartoffel", "Kartoffeln", "f", "food cookable", "food"),
    _noun("cake", "cakes", "Kuchen", "Kuchen", "m", "food", "food"),
    _noun("banana", "bananas", "Banane", "Bananen", "f", "food", "food"),
    _noun("tomato", "tomatoes", "Tomate", "Tomaten", "f", "food", "food"),
    _noun("pear", "pears", "Birne", "Birnen", "f", "food", "food"),
    _noun("bread", None, "Brot", None, "n", "food", "food"),
    _noun("cheese", None, "Käse", None, "m", "food", "food"),
    _noun("rice", None, "Reis", None, "m", "food cookable", "food"),
    _noun("soup", None, "Suppe", None, "f", "food cookable", "food"),
    _noun("milk", None, "Milch", None, "f", "drink", "food"),
    _noun("coffee", None, "Kaffee", None, "m", "drink", "food"),
    _noun("tea", None, "Tee", None, "m", "drink", "food"),
    _noun("water", None, "Wasser", None, "n", "drink", "food"),
    _noun("juice", None, "Saft", None, "m", "drink", "food"),
    # people
    _noun("man", "men", "Mann", "Männer", "m", "person", "person"),
    _noun("woman", "women", "Frau", "Frauen", "f", "person", "person"),
    _noun("child", "children", "Kind", "Kinder", "n", "person", "child"),
    _noun("boy", "boys", "Junge", "Jungen", "m", "person", "child", acc="Jungen"),
    _noun("girl", "girls", "Mädchen", "Mädchen", "n", "person", "child"),
    _noun("teacher", "teachers", "Lehrer", "Lehrer", "m", "person", "person"),
    _noun("doctor", "doctors", "Arzt", "Ärzte", "m", "person", "person"),
    _noun("neighbour", "neighbours", "Nachbar", "Nachbarn", "m", "person", "person", acc="Nachbarn"),
    _noun("student", "students", "Student", "Studenten", "m", "person", "person", acc="Studenten"),
    _noun("friend", "friends", "Freund", "Freunde", "m", "person", "person"),
    _noun("mother", "mothers", "Mutter", "Mütter", "f", "person family", "person"),
    _noun("father", "fathers", "Vater", "Väter", "m", "person family", "person"),
    _noun("brother", "brothers", "Bruder", "Brüder", "m", "person family", "person"),
    _noun("sister", "sisters", "Schwester", "Schwestern", "f", "person family", "person"),
    # vehicles and events (subjects of arrive/leave and begin)
    _noun("train", "trains", "Zug", "Züge", "m", "vehicle", "vehicle"),
    _noun("bus", "buses", "Bus", "Busse", "m", "vehicle", "vehicle"),
    _noun("plane", "planes", "Flugzeug", "Flugzeuge", "n", "vehicle flying", "vehicle"),
    _noun("film", "films", "Film", "Filme", "m", "event", "event"),
    _noun("concert", "concerts", "Konzert", "Konzerte", "n", "event", "event"),
    _noun("meeting", "meetings", "Treffen", "Treffen", "n", "event", "event"),
    _noun("party", "parties", "Party", "Partys", "f", "event", "event"),
    _noun("exam", "exams", "Prüfung", "Prüfungen", "f", "event", "event"),
    _noun("wedding", "weddings", "Hochzeit", "Hochzeiten", "f", "event", "event"),
    _noun("game", "games", "Spiel", "Spiele", "n", "event", "event"),
)}

# (English, German stem that takes the endings): "teuer" drops its e.
ADJECTIVES = {
    "red": "rot", "blue": "blau", "green": "grün", "black": "schwarz",
    "white": "weiß", "yellow": "gelb", "old": "alt", "new": "neu",
    "big": "groß", "small": "klein", "beautiful": "schön",
    "expensive": "teur", "cheap": "billig", "fresh": "frisch",
    "cold": "kalt", "hot": "heiß", "sweet": "süß", "good": "gut",
    "young": "jung", "friendly": "freundlich", "nice": "nett",
    "last": "letzt", "next": "nächst", "first": "erst", "long": "lang",
    "clean": "sauber", "dirty": "schmutzig",
}
ADJECTIVE_SETS = {
    "thing": ("red", "blue", "green", "black", "white", "yellow", "old",
              "new", "big", "small", "beautiful", "expensive", "cheap"),
    "place": ("big", "small", "new", "old", "clean", "dirty", "beautiful"),
    "animal": ("big", "small", "old", "young", "black", "white", "beautiful"),
    "food": ("fresh", "cold", "hot", "sweet", "good", "cheap", "expensive"),
    "person": ("old", "young", "friendly", "nice"),
    "child": ("small", "friendly", "nice"),
    "vehicle": ("last", "next", "first", "new", "old", "red"),
    "event": ("new", "long", "big", "last", "next", "first"),
}
# Sampling avoids "my man" (husband), "my women", "our mothers", "my film".
_NO_POSSESSIVE = frozenset({"man", "woman", "film"})
_NO_PLURAL_POSSESSIVE = frozenset({"mother", "father"})

# Predicative adjectives for "X is happy because ...".
PREDICATES = {"happy": "glücklich", "tired": "müde", "sad": "traurig",
              "angry": "wütend", "surprised": "überrascht"}

NAMES = ("Anna", "Maria", "Lena", "Sophie", "Emma", "Peter", "Paul", "Max",
         "Felix", "Tom")
CITIES = (("Berlin", "Berlin"), ("Hamburg", "Hamburg"), ("Munich", "München"),
          ("Cologne", "Köln"), ("Vienna", "Wien"), ("Zurich", "Zürich"),
          ("Rome", "Rom"), ("Prague", "Prag"), ("Paris", "Paris"),
          ("London", "London"))


@dataclasses.dataclass(frozen=True)
class Verb:
    en: str  # base form, with its particle: "tidy up", "look for"
    en_3sg: str
    en_past: str
    en_participle: str
    de_infinitive: str  # with a separable prefix: "anrufen"
    de_present: tuple  # ich, du, er/sie/es, wir/sie; without separable prefix
    de_participle: str
    de_auxiliary: str = "haben"  # or "sein"
    de_prefix: str = ""  # separable prefix, sent to the end of a main clause
    objects: frozenset = frozenset()  # noun kinds it takes; empty: none
    object_optional: bool = False
    subjects: frozenset = frozenset({"person"})
    de_complement: str = ""  # fixed phrase at the end of the middle field
    destination: bool = False  # takes "to CITY" / "nach STADT"
    tenses: frozenset = frozenset({"present", "modal", "past"})


def _verb(en, en_3sg, en_past, en_pp, de_inf, de_present, de_pp, aux="haben",
          prefix="", objects="", optional=False, subjects="person",
          complement="", destination=False, tenses="present modal past"):
    present = tuple(de_present.split())
    assert len(present) == 4, de_present
    return Verb(en, en_3sg, en_past, en_pp, de_inf, present, de_pp, aux,
                prefix, frozenset(objects.split()), optional,
                frozenset(subjects.split()), complement, destination,
                frozenset(tenses.split()))


VERBS = {v.en: v for v in (
    _verb("buy", "buys", "bought", "bought", "kaufen",
          "kaufe kaufst kauft kaufen", "gekauft", objects="thing food drink animal"),
    _verb("sell", "sells", "sold", "sold", "verkaufen",
          "verkaufe verkaufst verkauft verkaufen", "verkauft", objects="thing animal"),
    _verb("see", "sees", "saw", "seen", "sehen",
          "sehe siehst sieht sehen", "gesehen", objects="thing animal person"),
    _verb("read", "reads", "read", "read", "lesen",
          "lese liest liest lesen", "gelesen", objects="readable", optional=True),
    _verb("write", "writes", "wrote", "written", "schreiben",
          "schreibe schreibst schreibt schreiben", "geschrieben", objects="writable"),
    _verb("need", "needs", "needed", "needed", "brauchen",
          "brauche brauchst braucht brauchen", "gebraucht", objects="thing food drink",
          tenses="present past"),
    _verb("find", "finds", "found", "found", "finden",
          "finde findest findet finden", "gefunden", objects="thing animal"),
    _verb("look for", "looks for", "looked for", "looked for", "suchen",
          "suche suchst sucht suchen", "gesucht", objects="thing animal person"),
    _verb("take", "takes", "took", "taken", "nehmen",
          "nehme nimmst nimmt nehmen", "genommen", objects="thing food"),
    _verb("eat", "eats", "ate", "eaten", "essen",
          "esse isst isst essen", "gegessen", objects="food", optional=True),
    _verb("drink", "drinks", "drank", "drunk", "trinken",
          "trinke trinkst trinkt trinken", "getrunken", objects="drink"),
    _verb("cook", "cooks", "cooked", "cooked", "kochen",
          "koche kochst kocht kochen", "gekocht", objects="cookable", optional=True),
    _verb("visit", "visits", "visited", "visited", "besuchen",
          "besuche besuchst besucht besuchen", "besucht", objects="person"),
    _verb("meet", "meets", "met", "met", "treffen",
          "treffe triffst trifft treffen", "getroffen", objects="person"),
    _verb("have", "has", "had", "had", "haben",
          "habe hast hat haben", "gehabt", objects="thing food animal",
          tenses="present modal"),
    # separable verbs
    _verb("call", "calls", "called", "called", "anrufen",
          "rufe rufst ruft rufen", "angerufen", prefix="an", objects="person"),
    _verb("invite", "invites", "invited", "invited", "einladen",
          "lade lädst lädt laden", "eingeladen", prefix="ein", objects="person"),
    _verb("pick up", "picks up", "picked up", "picked up", "abholen",
          "hole holst holt holen", "abgeholt", prefix="ab", objects="person"),
    _verb("tidy up", "tidies up", "tidied up", "tidied up", "aufräumen",
          "räume räumst räumt räumen", "aufgeräumt", prefix="auf", objects="tidyable"),
    _verb("open", "opens", "opened", "opened", "aufmachen",
          "mache machst macht machen", "aufgemacht", prefix="auf", objects="openable"),
    _verb("close", "closes", "closed", "closed", "zumachen",
          "mache machst macht machen", "zugemacht", prefix="zu", objects="openable"),
    _verb("get up", "gets up", "got up", "got up", "aufstehen",
          "stehe stehst steht stehen", "aufgestanden", aux="sein", prefix="auf"),
    _verb("arrive", "arrives", "arrived", "arrived", "ankommen",
          "komme kommst kommt kommen", "angekommen", aux="sein", prefix="an",
          subjects="person vehicle"),
    _verb("leave", "leaves", "left", "left", "abfahren",
          "fahre fährst fährt fahren", "abgefahren", aux="sein", prefix="ab",
          subjects="vehicle"),
    _verb("do the shopping", "does the shopping", "did the shopping",
          "done the shopping", "einkaufen", "kaufe kaufst kauft kaufen",
          "eingekauft", prefix="ein"),
    _verb("watch TV", "watches TV", "watched TV", "watched TV", "fernsehen",
          "sehe siehst sieht sehen", "ferngesehen", prefix="fern"),
    # intransitive verbs
    _verb("begin", "begins", "began", "begun", "beginnen",
          "beginne beginnst beginnt beginnen", "begonnen", subjects="event",
          tenses="present past"),
    _verb("sleep", "sleeps", "slept", "slept", "schlafen",
          "schlafe schläfst schläft schlafen", "geschlafen"),
    _verb("work", "works", "worked", "worked", "arbeiten",
          "arbeite arbeitest arbeitet arbeiten", "gearbeitet"),
    _verb("come home", "comes home", "came home", "come home", "kommen",
          "komme kommst kommt kommen", "gekommen", aux="sein",
          complement="nach Hause"),
    _verb("drive", "drives", "drove", "driven", "fahren",
          "fahre fährst fährt fahren", "gefahren", aux="sein", destination=True),
    _verb("fly", "flies", "flew", "flown", "fliegen",
          "fliege fliegst fliegt fliegen", "geflogen", aux="sein", destination=True),
    _verb("travel", "travels", "travelled", "travelled", "reisen",
          "reise reist reist reisen", "gereist", aux="sein", destination=True),
    # "be" carries predicative adjectives; only present, never negated here
    _verb("be", "is", "was", "been", "sein", "bin bist ist sind", "gewesen",
          aux="sein", subjects="person vehicle event animal thing",
          tenses="present"),
)}
_SEPARABLE = tuple(v for v in VERBS.values() if v.de_prefix)
# Verbs of "that" clauses: "I know that ..." → "Ich weiß, dass ...".
SAYING_VERBS = {
    "know": ("knows", "weiß weißt weiß wissen"),
    "say": ("says", "sage sagst sagt sagen"),
    "hope": ("hopes", "hoffe hoffst hofft hoffen"),
    "believe": ("believes", "glaube glaubst glaubt glauben"),
}
MODALS = {  # English (not 3sg, 3sg, negated), German forms
    "want": (("want to", "wants to"), ("do not want to", "does not want to"),
             "will willst will wollen"),
    "can": (("can", "can"), ("cannot", "cannot"), "kann kannst kann können"),
    # "must not" means "darf nicht", not "muss nicht": never negated.
    "must": (("must", "must"), None, "muss musst muss müssen"),
}
_AUXILIARIES = {"haben": "habe hast hat haben".split(),
                "sein": "bin bist ist sind".split()}

# Person codes; the German verb table has four forms.
_PERSON_INDEX = {"1sg": 0, "2sg": 1, "3sg": 2, "1pl": 3, "3pl": 3}


@dataclasses.dataclass(frozen=True)
class Phrase:
    """A noun phrase or pronoun: English and its German cases."""

    en: str
    de_nominative: str
    de_accusative: str
    person: str = "3sg"  # 1sg 2sg 3sg 1pl 3pl
    kind: str = "person"  # person thing animal food vehicle event ...
    key: str = ""  # identity, so a sentence does not use a noun twice


_PRONOUNS = {
    "I": Phrase("I", "ich", "mich", "1sg", "person", "I"),
    "you": Phrase("you", "du", "dich", "2sg", "person", "you"),
    "he": Phrase("he", "er", "ihn", "3sg", "person", "he"),
    "she": Phrase("she", "sie", "sie", "3sg", "person", "she"),
    "we": Phrase("we", "wir", "uns", "1pl", "person", "we"),
    "they": Phrase("they", "sie", "sie", "3pl", "person", "they"),
}


def pronoun(word):
    """A subject pronoun ("I", "you", "he", "she", "we", "they") or a name."""
    if word in _PRONOUNS:
        return _PRONOUNS[word]
    if word in NAMES:
        return Phrase(word, word, word, "3sg", "person", word)
    raise ValueError(f"unknown pronoun or name {word!r}; pronouns: "
                     f"{sorted(_PRONOUNS)}, names: {NAMES}")


_DEFINITE = {"nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
             "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"}}
# Adjective endings: weak after der/die/das, mixed after ein/mein,
# strong with no article (and after a numeral).
_WEAK = {"nom": {"m": "e", "f": "e", "n": "e", "pl": "en"},
         "acc": {"m": "en", "f": "e", "n": "e", "pl": "en"}}
_MIXED = {"nom": {"m": "er", "f": "e", "n": "es", "pl": "en"},
          "acc": {"m": "en", "f": "e", "n": "es", "pl": "en"}}
_STRONG = {"nom": {"m": "er", "f": "e", "n": "es", "pl": "e"},
           "acc": {"m": "en", "f": "e", "n": "es", "pl": "e"}}
_EIN_ENDING = {"nom": {"m": "", "f": "e", "n": "", "pl": "e"},
               "acc": {"m": "en", "f": "e", "n": "", "pl": "e"}}
_POSSESSIVES = {"my": "mein", "your": "dein", "our": "unser"}
DETERMINERS = ("the", "a", "my", "your", "our", None)
_THE_UNLESS_COUNTED = object()


def _english_article(next_word):
    return "an" if next_word[:1].lower() in "aeiou" else "a"


def noun_phrase(noun, *, det=_THE_UNLESS_COUNTED, adjective=None, plural=False,
                count=None):
    """A noun phrase in English and German (nominative and accusative).

    det: "the" (the default), "a", "my", "your", "our" or None (bare plural
    or mass noun). count: a number (1-9999) instead of a determiner: "twenty-one red
    apples" → "einundzwanzig rote Äpfel"; count 1 is "one apple" → "ein
    Apfel" / "einen Apfel".
    """
    if noun not in NOUNS:
        raise ValueError(f"unknown noun {noun!r}")
    entry = NOUNS[noun]
    if det is _THE_UNLESS_COUNTED:
        det = None if count is not None else "the"
    if adjective is not None and adjective not in ADJECTIVES:
        raise ValueError(f"unknown adjective {adjective!r}")
    if det not in DETERMINERS:
        raise ValueError(f"det must be one of {DETERMINERS}, got {det!r}")
    if count is not None:
        _check_int(count, 1, 9999, "count")
        if det is not None:
            raise ValueError("give either det or count, not both")
        plural = count > 1
    if plural and not entry.countable:
        raise ValueError(f"{noun!r} is a mass noun: no plural or count")
    if not entry.countable and det == "a":
        raise ValueError(f"{noun!r} is a mass noun: no indefinite article")
    if det is None and count is None and entry.countable and not plural:
        raise ValueError(f"singular {noun!r} needs a determiner")
    if det == "a" and plural:
        raise ValueError("'a' takes a singular noun")

    gender = "pl" if plural else entry.gender
    en_noun = entry.en_plural if plural else entry.en
    en_words = [adjective] if adjective else []
    en_words.append(en_noun)

    forms = {}
    for case in ("nom", "acc"):
        words = []
        if count == 1 or det in ("a", "my", "your", "our"):
            stem = "ein" if (count == 1 or det == "a") else _POSSESSIVES[det]
            words.append(stem + _EIN_ENDING[case][gender])
            endings = _MIXED
        elif count is not None:
            words.append(german_cardinal(count))
            endings = _STRONG
        elif det == "the":
            words.append(_DEFINITE[case][gender])
            endings = _WEAK
        else:
            endings = _STRONG
        if adjective:
            words.append(ADJECTIVES[adjective] + endings[case][gender])
        if plural:
            words.append(entry.de_plural)
        elif case == "acc" and entry.de_accusative:
            words.append(entry.de_accusative)
        else:
            words.append(entry.de)
        forms[case] = " ".join(words)

    if count is not None:
        en_det = english_cardinal(count)
    elif det == "a":
        en_det = _english_article(en_words[0])
    else:
        en_det = det
    english = " ".join(([en_det] if en_det else []) + en_words)
    kind = "person" if "person" in entry.kinds else sorted(entry.kinds)[0]
    return Phrase(english, forms["nom"], forms["acc"],
                  "3pl" if plural else "3sg", kind, entry.en)


@dataclasses.dataclass(frozen=True)
class TimeAdverb:
    """A time adverbial: (English, German) and the tenses it fits."""

    en: str
    de: str
    tenses: frozenset = frozenset({"present", "past"})


_SIMPLE_TIMES = {
    "today": ("heute", "present past"),
    "tomorrow": ("morgen", "present"),
    "yesterday": ("gestern", "past"),
    "now": ("jetzt", "present"),
    "tonight": ("heute Abend", "present"),
    "this morning": ("heute Morgen", "past"),
    "every day": ("jeden Tag", "present"),
    "at the weekend": ("am Wochenende", "present past"),
    "in the morning": ("am Morgen", "present past"),
    "in the evening": ("am Abend", "present past"),
}


def time_adverb(text):
    """A time adverbial by its English text: "tomorrow", "on Monday", ...

    Clock times: `clock_adverb`; dates: `date_adverb`.
    """
    if text in _SIMPLE_TIMES:
        german, tenses = _SIMPLE_TIMES[text]
        return TimeAdverb(text, german, frozenset(tenses.split()))
    for en_day, de_day in WEEKDAYS:
        if text == f"on {en_day}":
            return TimeAdverb(text, f"am {de_day}")
    raise ValueError(f"unknown time adverbial {text!r}")


def clock_adverb(hour, minute, *, oclock=True, digital=False):
    """"at half past seven" / "um halb acht" (or "at 14:05" with digital)."""
    en, de = digital_time(hour, minute) if digital else analog_time(
        hour, minute, oclock=oclock)
    return TimeAdverb(f"at {en}", f"um {de}")


def date_adverb(day, month, *, style="of", weekday=None):
    """"on the third of May" / "am dritten Mai" (weekday: "am Montag, dem ...")."""
    en, de = date_phrase(day, month, style=style, case="dative")
    if weekday is None:
        return TimeAdverb(f"on {en}", f"am {de.split(' ', 1)[1]}")
    en_day, de_day = WEEKDAYS[weekday]
    return TimeAdverb(f"on {en_day}, {en}", f"am {de_day}, {de}")


# --------------------------------------------------------------------------
# Clauses
# --------------------------------------------------------------------------

MODES = ("present", "want", "can", "must", "past")


@dataclasses.dataclass(frozen=True)
class Clause:
    """One clause; rendered as a main, fronted or subordinate clause.

    mode: "present", "want"/"can"/"must" (modal + infinitive) or "past"
    (German Perfekt; English present perfect, or simple past when a time
    adverbial is given).
    """

    subject: Phrase
    verb: Verb
    obj: Phrase | None = None
    time: TimeAdverb | None = None
    destination: tuple | None = None  # (English city, German city)
    predicate: tuple | None = None  # (English, German) after "be"
    mode: str = "present"
    negated: bool = False

    def __post_init__(self):
        v = self.verb
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        tense = "modal" if self.mode in MODALS else self.mode
        if tense not in v.tenses:
            raise ValueError(f"verb {v.en!r} is not used in mode {self.mode!r}")
        if self.obj is None and v.objects and not v.object_optional:
            raise ValueError(f"verb {v.en!r} needs an object")
        if self.obj is not None and not v.objects:
            raise ValueError(f"verb {v.en!r} takes no object")
        if (self.destination is None) == v.destination:
            raise ValueError(f"verb {v.en!r}: destination "
                             f"{'required' if v.destination else 'not allowed'}")
        if (self.predicate is None) == (v.en == "be"):
            raise ValueError("a predicate goes with the verb 'be' only")
        if self.time is not None:
            wanted = "past" if self.mode == "past" else "present"
            if wanted not in self.time.tenses:
                raise ValueError(f"time {self.time.en!r} does not fit mode {self.mode!r}")
        if self.negated and (self.mode == "must" or v.en == "be"):
            raise ValueError("'must' and 'be' are not negated in this corpus")
        if self.negated and self.time is not None and self.time.en == "every day":
            # "not ... every day" negates the frequency ("nicht jeden Tag"),
            # which this word order does not model.
            raise ValueError("'every day' is not negated in this corpus")
        if (self.mode == "past" and self.time is not None and not self.negated
                and v.en_past == v.en and self.subject.person != "3sg"):
            # "Today I read the book." would be present and past at once.
            raise ValueError(f"English simple past of {v.en!r} equals its "
                             f"present: ambiguous")


def _english_verb_group(clause):
    v, person, neg = clause.verb, clause.subject.person, clause.negated
    third = person == "3sg"
    if clause.mode == "present":
        if v.en == "be":
            return {"1sg": "am", "3sg": "is"}.get(person, "are")
        if neg:
            return f"{'does' if third else 'do'} not {v.en}"
        return v.en_3sg if third else v.en
    if clause.mode in MODALS:
        positive, negative, _ = MODALS[clause.mode]
        return f"{(negative if neg else positive)[third]} {v.en}"
    if clause.time is not None:  # simple past with a past time adverbial
        return f"did not {v.en}" if neg else v.en_past
    return f"{'has' if third else 'have'}{' not' if neg else ''} {v.en_participle}"


def _english_parts(clause):
    words = [_english_verb_group(clause)]
    if clause.obj is not None:
        words.append(clause.obj.en)
    if clause.predicate is not None:
        words.append(clause.predicate[0])
    if clause.destination is not None:
        words.append(f"to {clause.destination[0]}")
    return " ".join(words)


def _german_parts(clause, with_time=True):
    """(finite verb of a main clause, middle field, right bracket, finite
    verb of a subordinate clause)."""
    v, index = clause.verb, _PERSON_INDEX[clause.subject.person]
    middle = []
    if with_time and clause.time is not None:
        middle.append(clause.time.de)
    if clause.obj is not None:
        middle.append(clause.obj.de_accusative)
    # "nicht" follows time and definite objects, precedes directional
    # complements, predicates and the verb bracket.
    if clause.negated:
        middle.append("nicht")
    if clause.predicate is not None:
        middle.append(clause.predicate[1])
    if v.de_complement:
        middle.append(v.de_complement)
    if clause.destination is not None:
        middle.append(f"nach {clause.destination[1]}")
    if clause.mode == "present":
        finite = v.de_present[index]
        return finite, middle, v.de_prefix, v.de_prefix + finite
    if clause.mode in MODALS:
        finite = MODALS[clause.mode][2].split()[index]
        return finite, middle, v.de_infinitive, finite
    finite = _AUXILIARIES[v.de_auxiliary][index]
    return finite, middle, v.de_participle, finite


def _join(*parts):
    return " ".join(p for p in parts if p)


def _render_main(clause, fronted=False):
    """Clause text (no final punctuation): subject-verb order, or with the
    time adverbial fronted (German verb second: "Morgen kaufe ich ...")."""
    subject = clause.subject
    if fronted:
        if clause.time is None:
            raise ValueError("a fronted clause needs a time adverbial")
        finite, middle, bracket, _ = _german_parts(clause, with_time=False)
        german = _join(clause.time.de, finite, subject.de_nominative,
                       *middle, bracket)
        english = _join(clause.time.en, subject.en, _english_parts(clause))
    else:
        finite, middle, bracket, _ = _german_parts(clause)
        german = _join(subject.de_nominative, finite, *middle, bracket)
        english = _join(subject.en, _english_parts(clause),
                        clause.time.en if clause.time else "")
    return english, german


def _render_inverted_after(clause, english_front, german_front):
    """A main clause after a fronted subordinate clause: verb first."""
    finite, middle, bracket, _ = _german_parts(clause)
    english = f"{english_front}, " + _join(
        clause.subject.en, _english_parts(clause),
        clause.time.en if clause.time else "")
    german = f"{german_front}, " + _join(
        finite, clause.subject.de_nominative, *middle, bracket)
    return english, german


def _render_subordinate(clause):
    """Verb-final clause: "der Zug um acht ankommt", "er das Auto kaufen will"."""
    _, middle, bracket, finite_sub = _german_parts(clause)
    if clause.mode == "present":
        bracket = ""  # the prefix is already joined to the finite verb
    german = _join(clause.subject.de_nominative, *middle, bracket, finite_sub)
    english = _join(clause.subject.en, _english_parts(clause),
                    clause.time.en if clause.time else "")
    return english, german


def _sentence(english, german, mark="."):
    return _capitalise(english) + mark, _capitalise(german) + mark


def simple_sentence(clause, *, fronted=False):
    """(English, German) sentence for one clause."""
    return _sentence(*_render_main(clause, fronted=fronted))


_CONJUNCTIONS = {"that": "dass", "because": "weil", "when": "wenn"}


def subordinate_sentence(main, conjunction, clause, *, subordinate_first=False,
                         saying_verb=None):
    """A main clause with a verb-final subordinate clause.

    conjunction: "that" (main is a `Phrase`, the subject of `saying_verb`:
    "know", "say", "hope", "believe"), "because" or "when" (main is a
    `Clause`). subordinate_first (only "when") fronts the subordinate
    clause, and the German main clause then starts with its verb.
    """
    if conjunction not in _CONJUNCTIONS:
        raise ValueError(f"conjunction must be one of {sorted(_CONJUNCTIONS)}")
    sub_en, sub_de = _render_subordinate(clause)
    de_conj = _CONJUNCTIONS[conjunction]
    if conjunction == "that":
        if saying_verb not in SAYING_VERBS:
            raise ValueError(f"saying_verb must be one of {sorted(SAYING_VERBS)}")
        en_3sg, de_forms = SAYING_VERBS[saying_verb]
        en_verb = en_3sg if main.person == "3sg" else saying_verb
        de_verb = de_forms.split()[_PERSON_INDEX[main.person]]
        return _sentence(f"{main.en} {en_verb} that {sub_en}",
                         f"{main.de_nominative} {de_verb}, dass {sub_de}")
    if subordinate_first:
        if conjunction != "when":
            raise ValueError("only a 'when' clause is fronted")
        return _sentence(*_render_inverted_after(
            main, f"when {sub_en}", f"wenn {sub_de}"))
    main_en, main_de = _render_main(main)
    return _sentence(f"{main_en} {conjunction} {sub_en}",
                     f"{main_de}, {de_conj} {sub_de}")


# --------------------------------------------------------------------------
# Random sampling
# --------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _nouns_of_cached(kinds):
    return tuple(n for n in NOUNS.values() if n.kinds & kinds)


def _nouns_of(kinds):
    return _nouns_of_cached(frozenset(kinds))


def _sample_number(rng, low, high):
    """Uniform over the number of digits, then uniform: small and large
    numbers are both frequent."""
    digits = rng.randint(len(str(low)), len(str(high)))
    return rng.randint(max(low, 10 ** (digits - 1) if digits > 1 else 0),
                       min(high, 10 ** digits - 1))


def _countable_number(rng, low=1, high=9999):
    """A count for a noun; avoids 101, 201, 1001, ... whose German form
    before a noun is disputed (hundertein/hunderteins)."""
    while True:
        n = _sample_number(rng, low, high)
        if not (n > 100 and n % 100 == 1):
            return n


def _sample_noun_phrase(rng, noun, *, allow_count=False, adjective_p=0.5,
                        plural_p=0.2):
    adjective = (rng.choice(ADJECTIVE_SETS[noun.adjectives])
                 if rng.random() < adjective_p else None)
    if not noun.countable:
        det = rng.choice(("the", None, None, "my", "our"))
        return noun_phrase(noun.en, det=det, adjective=adjective)
    if allow_count and rng.random() < 0.15:
        return noun_phrase(noun.en, det=None, adjective=adjective,
                           count=_countable_number(rng, 2, 20))
    plural = rng.random() < plural_p
    if plural:
        options = ("the", "the", "my", "your", "our", None)
    else:
        options = ("the", "the", "the", "a", "a", "my", "your", "our")
    if noun.en in _NO_POSSESSIVE or (plural and noun.en in _NO_PLURAL_POSSESSIVE):
        options = tuple(d for d in options if d not in _POSSESSIVES)
    det = rng.choice(options)
    return noun_phrase(noun.en, det=det, adjective=adjective, plural=plural)


def _sample_subject(rng, kinds=frozenset({"person"}), *, pronoun_p=0.4):
    if "person" in kinds and rng.random() < pronoun_p:
        r = rng.random()
        if r < 0.75:
            return _PRONOUNS[rng.choice(tuple(_PRONOUNS))]
        return pronoun(rng.choice(NAMES))
    noun = rng.choice(_nouns_of(kinds))
    if noun.adjectives in ("vehicle", "event"):
        adjective = (rng.choice(ADJECTIVE_SETS[noun.adjectives])
                     if rng.random() < 0.3 else None)
        return noun_phrase(noun.en, det="the", adjective=adjective)
    return _sample_noun_phrase(rng, noun, adjective_p=0.3)


def _sample_object(rng, verb, subject, *, adjective_p=0.4, allow_count=True):
    candidates = [n for n in _nouns_of(verb.objects) if n.en != subject.key]
    return _sample_noun_phrase(rng, rng.choice(candidates),
                               allow_count=allow_count, adjective_p=adjective_p)


def _sample_time(rng, tense, *, clock_p=0.3):
    r = rng.random()
    if r < clock_p:
        hour = rng.randint(1, 12)
        minute = rng.choice(ANALOG_MINUTES)
        return clock_adverb(hour, minute, oclock=rng.random() < 0.6)
    if r < clock_p + 0.2:
        return time_adverb(f"on {rng.choice(WEEKDAYS)[0]}")
    options = [t for t, (_, tenses) in _SIMPLE_TIMES.items()
               if tense in tenses.split()]
    return time_adverb(rng.choice(options))


def _negatable_object(phrase):
    """'nicht' is only used with definite objects (or none): an indefinite
    or counted one would need 'kein'."""
    return phrase is None or phrase.en.split()[0] in ("the", "my", "your", "our")


def _sample_clause(rng, *, verbs=None, mode=None, time_p=0.3, neg_p=0.12,
                   require_time=False, obj_adjective_p=0.4, allow_count=True):
    verbs = verbs or [v for v in VERBS.values() if v.en != "be"]
    while True:
        verb = rng.choice(verbs)
        clause_mode = mode or rng.choice(
            ("present", "present", "present", "want", "can", "must", "past",
             "past"))
        tense = "modal" if clause_mode in MODALS else clause_mode
        if tense not in verb.tenses:
            continue
        subj = _sample_subject(rng, verb.subjects)
        if subj.kind not in verb.subjects or (
                clause_mode == "want" and subj.kind != "person"):
            continue
        obj = None
        if verb.objects and not (verb.object_optional and rng.random() < 0.3):
            obj = _sample_object(rng, verb, subj, adjective_p=obj_adjective_p,
                                 allow_count=allow_count)
        time = None
        if require_time or rng.random() < time_p:
            time = _sample_time(rng, "past" if clause_mode == "past" else "present")
        destination = rng.choice(CITIES) if verb.destination else None
        negated = (rng.random() < neg_p and clause_mode != "must"
                   and _negatable_object(obj))
        try:
            return Clause(subj, verb, obj, time, destination, None,
                          clause_mode, negated)
        except ValueError:  # a combination the corpus avoids; draw again
            continue


# --- categories -----------------------------------------------------------

def _numbers(rng):
    r = rng.random()
    if r < 0.2:
        n = _sample_number(rng, 0, 9999)
        return (f"The number is {english_cardinal(n)}.",
                f"Die Zahl ist {german_cardinal(n)}.")
    if r < 0.3:
        if rng.random() < 0.15:
            noun = rng.choice(_nouns_of({"thing", "food", "animal"}))
            while not noun.countable:
                noun = rng.choice(_nouns_of({"thing", "food", "animal"}))
            phrase = noun_phrase(noun.en, count=1)
            return (f"There is {phrase.en}.",
                    f"Es gibt {phrase.de_accusative}.")
        noun = rng.choice([n for n in _nouns_of({"thing", "food", "animal"})
                           if n.countable])
        phrase = noun_phrase(noun.en, count=_countable_number(rng, 2),
                             adjective=(rng.choice(ADJECTIVE_SETS[noun.adjectives])
                                        if rng.random() < 0.3 else None))
        return f"There are {phrase.en}.", f"Es gibt {phrase.de_accusative}."
    if r < 0.45:  # prices
        noun = rng.choice(_nouns_of({"thing", "food", "animal"}))
        subject = _sample_noun_phrase(rng, noun, adjective_p=0.3)
        n = _countable_number(rng)
        plural = subject.person == "3pl"
        en_amount = "one euro" if n == 1 else f"{english_cardinal(n)} euros"
        de_amount = "einen Euro" if n == 1 else f"{german_cardinal(n)} Euro"
        return _sentence(
            f"{subject.en} {'cost' if plural else 'costs'} {en_amount}",
            f"{subject.de_nominative} {'kosten' if plural else 'kostet'} {de_amount}")
    if r < 0.55:  # ages
        subject = _sample_subject(rng, frozenset({"person", "animal"}))
        n = rng.randint(1, 99)
        predicate = ("one year old", "ein Jahr alt") if n == 1 else (
            f"{english_cardinal(n)} years old", f"{german_cardinal(n)} Jahre alt")
        return simple_sentence(Clause(subject, VERBS["be"], predicate=predicate))
    if r < 0.65:  # arithmetic
        op = rng.choice(("plus", "minus", "times"))
        if op == "times":
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            result = a * b
        else:
            a, b = _sample_number(rng, 0, 999), _sample_number(rng, 0, 999)
            if op == "minus" and b > a:
                a, b = b, a
            result = a + b if op == "plus" else a - b
        de_op = {"plus": "plus", "minus": "minus", "times": "mal"}[op]
        return _sentence(
            f"{english_cardinal(a)} {op} {english_cardinal(b)} is "
            f"{english_cardinal(result)}",
            f"{german_cardinal(a)} {de_op} {german_cardinal(b)} ist "
            f"{german_cardinal(result)}")
    # counted objects: "I have twenty-one apples."
    verb = VERBS[rng.choice(("have", "buy", "need", "see", "sell", "find"))]
    subject = _sample_subject(rng)
    noun = rng.choice([n for n in _nouns_of(verb.objects & {"thing", "food", "animal"})
                       if n.countable])
    n = 1 if rng.random() < 0.1 else _countable_number(rng, 2)
    adjective = (rng.choice(ADJECTIVE_SETS[noun.adjectives])
                 if rng.random() < 0.25 else None)
    obj = noun_phrase(noun.en, count=n, adjective=adjective)
    mode = rng.choice(("present",) * 4 + ("want", "can"))
    if "modal" not in verb.tenses:
        mode = "present"
    return simple_sentence(Clause(subject, verb, obj, mode=mode))


def _german_genitive(name):
    """Annas, Peters; names ending in an s sound take an apostrophe: Max'."""
    return name + ("'" if name[-1] in "sßxz" else "s")


def _random_date(rng):
    month = rng.randint(1, 12)
    return rng.randint(1, MONTHS[month - 1][2]), month


def _dates(rng):
    r = rng.random()
    day, month = _random_date(rng)
    style = "of" if rng.random() < 0.7 else "month_day"
    if r < 0.2:  # "Today is the third of May."
        en_day, de_day = rng.choice((("today", "heute"), ("tomorrow", "morgen"),
                                     ("yesterday", "gestern")))
        en_verb, de_verb = ("was", "war") if en_day == "yesterday" else ("is", "ist")
        en_date, de_date = date_phrase(day, month, style=style)
        if rng.random() < 0.3:
            weekday_en, weekday_de = rng.choice(WEEKDAYS)
            if rng.random() < 0.3:
                return _sentence(f"{en_day} {en_verb} {weekday_en}",
                                 f"{de_day} {de_verb} {weekday_de}")
            en_date = f"{weekday_en}, {date_phrase(day, month)[0]}"
            de_date = f"{weekday_de}, {de_date}"
        return _sentence(f"{en_day} {en_verb} {en_date}",
                         f"{de_day} {de_verb} {de_date}")
    when = date_adverb(day, month, style=style)
    if r < 0.35:  # "I was born on ..."
        subject = _sample_subject(rng, pronoun_p=0.6)
        en_be = "was" if subject.person in ("1sg", "3sg") else "were"
        de_be = _AUXILIARIES["sein"][_PERSON_INDEX[subject.person]]
        return _sentence(f"{subject.en} {en_be} born {when.en}",
                         f"{subject.de_nominative} {de_be} {when.de} geboren")
    if r < 0.5:  # "My birthday is on ..."
        owners = [("my", "mein"), ("your", "dein"), ("his", "sein"),
                  ("her", "ihr")]
        owners += [(f"{name}'s", _german_genitive(name)) for name in NAMES]
        en_owner, de_owner = rng.choice(owners)
        return _sentence(f"{en_owner} birthday is {when.en}",
                         f"{de_owner} Geburtstag ist {when.de}")
    if r < 0.7:  # "The concert is on Friday, the third of May."
        noun = rng.choice(_nouns_of({"event"}))
        det = "the" if noun.en in _NO_POSSESSIVE else rng.choice(
            ("the", "the", "my", "our"))
        subject = noun_phrase(noun.en, det=det)
        s = rng.random()
        if s < 0.3:
            when = time_adverb(f"on {rng.choice(WEEKDAYS)[0]}")
        elif s < 0.5:
            when = date_adverb(day, month, weekday=rng.randrange(7))
        return _sentence(f"{subject.en} is {when.en}",
                         f"{subject.de_nominative} ist {when.de}")
    # "We drive to Vienna on the third of May." with modal/past, maybe fronted
    verb = VERBS[rng.choice(("drive", "fly", "travel"))]
    mode = rng.choice(("present", "present", "want", "can", "must", "past"))
    if rng.random() < 0.25:
        when = time_adverb(f"on {rng.choice(WEEKDAYS)[0]}")
    clause = Clause(_sample_subject(rng), verb, time=when,
                    destination=rng.choice(CITIES), mode=mode)
    return simple_sentence(clause, fronted=rng.random() < 0.35)


def _random_clock(rng, bare_p):
    if rng.random() < 0.35:
        return digital_time(rng.randint(0, 23), rng.randint(0, 59))
    return analog_time(rng.randint(1, 12), rng.choice(ANALOG_MINUTES),
                       oclock=rng.random() >= bare_p)


def _times(rng):
    r = rng.random()
    if r < 0.25:  # "It is half past seven."; a bare "It is seven." is not used
        en, de = _random_clock(rng, bare_p=0.0)
        return _sentence(f"it is {en}", f"es ist {de}")
    en, de = _random_clock(rng, bare_p=0.4)
    when = TimeAdverb(f"at {en}", f"um {de}")
    if rng.random() < 0.2:  # "on Monday at half past seven"
        en_day, de_day = rng.choice(WEEKDAYS)
        when = TimeAdverb(f"{when.en} on {en_day}", f"am {de_day} {when.de}")
    verbs = [VERBS[v] for v in ("get up", "arrive", "leave", "begin", "eat",
                                "come home", "sleep", "work", "do the shopping",
                                "watch TV", "cook", "call", "pick up", "meet")]
    clause = _sample_clause(rng, verbs=verbs, mode=rng.choice(
        ("present",) * 4 + ("want", "must", "past")), time_p=0.0, neg_p=0.0)
    clause = dataclasses.replace(clause, time=when)
    return simple_sentence(clause, fronted=rng.random() < 0.3)


def _modal_verbs(rng):
    clause = _sample_clause(rng, mode=rng.choice(("want", "can", "must")))
    return simple_sentence(clause)


def _perfect_tense(rng):
    clause = _sample_clause(rng, mode="past", time_p=0.4, neg_p=0.15)
    return simple_sentence(clause, fronted=clause.time is not None
                           and rng.random() < 0.3)


def _separable_verbs(rng):
    clause = _sample_clause(rng, verbs=list(_SEPARABLE), time_p=0.5)
    return simple_sentence(clause, fronted=clause.time is not None
                           and rng.random() < 0.3)


def _inversion(rng):
    clause = _sample_clause(rng, require_time=True, neg_p=0.08)
    return simple_sentence(clause, fronted=True)


def _short_clause(rng, **kwargs):
    return _sample_clause(rng, obj_adjective_p=0.25, allow_count=False, **kwargs)


def _predicate_clause(rng):
    en, de = rng.choice(tuple(PREDICATES.items()))
    return Clause(_sample_subject(rng, pronoun_p=0.6), VERBS["be"],
                  predicate=(en, de))


def _subordinate_clauses(rng):
    r = rng.random()
    if r < 0.35:
        subject = _sample_subject(rng, pronoun_p=0.6)
        inner = _short_clause(rng, time_p=0.25)
        return subordinate_sentence(subject, "that", inner,
                                    saying_verb=rng.choice(tuple(SAYING_VERBS)))
    # "when" is "wenn" only for present or repeated events, so no past here.
    conjunction = "because" if r < 0.7 else "when"
    inner = _short_clause(
        rng, time_p=0.2,
        mode=None if conjunction == "because" else rng.choice(
            ("present", "present", "can", "want")))
    if rng.random() < 0.5:
        main = _predicate_clause(rng)
    else:
        main = _short_clause(rng, time_p=0.0, neg_p=0.0,
                             mode=rng.choice(("present", "present", "want", "must")))
    fronted = conjunction == "when" and rng.random() < 0.5
    return subordinate_sentence(main, conjunction, inner,
                                subordinate_first=fronted)


def _noun_phrases(rng):
    verbs = [v for v in VERBS.values() if v.objects]
    while True:
        verb = rng.choice(verbs)
        subject = _sample_subject(rng, verb.subjects, pronoun_p=0.3)
        if subject.kind in verb.subjects:
            break
    if rng.random() < 0.5 and subject.en in _PRONOUNS:
        # a noun subject exercises nominative endings: "Der alte Mann ..."
        subject = _sample_noun_phrase(
            rng, rng.choice(_nouns_of({"person"})), adjective_p=0.7)
    obj = _sample_object(rng, verb, subject, adjective_p=0.8)
    mode = "want" if rng.random() < 0.2 and "modal" in verb.tenses else "present"
    return simple_sentence(Clause(subject, verb, obj, mode=mode))


_GENERATORS = {
    "numbers": _numbers,
    "dates": _dates,
    "times": _times,
    "modal_verbs": _modal_verbs,
    "perfect_tense": _perfect_tense,
    "separable_verbs": _separable_verbs,
    "inversion": _inversion,
    "subordinate_clauses": _subordinate_clauses,
    "noun_phrases": _noun_phrases,
}
assert tuple(_GENERATORS) == CATEGORIES


# --------------------------------------------------------------------------
# Public generation API
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Example:
    category: str
    en: str
    de: str


def _check_categories(categories):
    if categories is None:
        return list(CATEGORIES)
    if isinstance(categories, str):
        categories = [categories]
    categories = list(categories)
    unknown = [c for c in categories if c not in _GENERATORS]
    if unknown or not categories:
        raise ValueError(f"categories must be a non-empty subset of "
                         f"{CATEGORIES}, got {categories!r}")
    return categories


def _draw(rng, categories):
    weights = [DEFAULT_WEIGHTS[c] for c in categories]
    while True:
        category = rng.choices(categories, weights)[0]
        english, german = _GENERATORS[category](rng)
        if len(english.split()) <= MAX_ENGLISH_WORDS:
            return Example(category, english, german)


def _collect(rng, n, categories, exclude_en=frozenset(), exclude_de=frozenset()):
    examples, seen = [], set()
    budget = 50 * n + 1000
    while len(examples) < n:
        if budget == 0:
            raise ValueError(
                f"could draw only {len(examples)} of {n} distinct pairs for "
                f"categories {categories}; ask for fewer")
        budget -= 1
        example = _draw(rng, categories)
        if (example.en in seen or example.en in exclude_en
                or example.de in exclude_de):
            continue
        seen.add(example.en)
        examples.append(example)
    return examples


def generate_examples(n, seed=0, categories=None):
    """n distinct (by English side) `Example`s, deterministic in seed."""
    _check_int(n, 0, 10 ** 7, "n")
    categories = _check_categories(categories)
    return _collect(random.Random(seed), n, categories)


def generate_pairs(n, seed=0, categories=None):
    """n distinct (English, German) pairs, deterministic in seed.

    categories: None (all of CATEGORIES, mixed by DEFAULT_WEIGHTS) or a
    subset.
    """
    return [(e.en, e.de) for e in generate_examples(n, seed, categories)]


def make_splits(n_train, n_test, seed=0, categories=None, *,
                return_examples=False):
    """(train, test) lists of (English, German) pairs with no sentence shared.

    The held-out pairs are drawn first (so they depend only on n_test, seed
    and categories); train pairs are then drawn from the same distribution,
    skipping any whose English or German side occurs in the held-out split.
    Both splits are free of duplicates. return_examples=True gives
    `Example`s (with their category) instead of pairs.
    """
    _check_int(n_train, 0, 10 ** 7, "n_train")
    _check_int(n_test, 0, 10 ** 7, "n_test")
    categories = _check_categories(categories)
    rng = random.Random(seed)
    test = _collect(rng, n_test, categories)
    train = _collect(rng, n_train, categories,
                     exclude_en={e.en for e in test},
                     exclude_de={e.de for e in test})
    if return_examples:
        return train, test
    return [(e.en, e.de) for e in train], [(e.en, e.de) for e in test]


def write_jsonl(path, pairs):
    """Writes {"en": ..., "de": ...} lines (gzip if path ends in .gz) with
    `keras_transformer.data.corpus.write_jsonl`.

    pairs: (English, German) tuples or `Example`s (whose category is
    written too). Returns the number of lines written.
    """
    from keras_transformer.data.corpus import write_jsonl as write_records

    def records():
        for index, pair in enumerate(pairs):
            if isinstance(pair, Example):
                yield {"en": pair.en, "de": pair.de, "category": pair.category}
                continue
            try:
                english, german = pair
            except (TypeError, ValueError):
                raise ValueError(f"{path}: pair {index} is not an (english, german) pair: {pair!r}") from None
            if not isinstance(english, str) or not isinstance(german, str):
                raise ValueError(f"{path}: pair {index} must hold two strings")
            yield {"en": english, "de": german}

    return write_records(path, records())

def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Write the synthetic English-German corpus as JSON lines.")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--train", type=int, default=30_000)
    parser.add_argument("--test", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--categories", nargs="*", default=None,
                        choices=CATEGORIES)
    args = parser.parse_args(argv)
    train, test = make_splits(args.train, args.test, args.seed,
                              args.categories, return_examples=True)
    for name, examples in (("train", train), ("test", test)):
        path = os.path.join(args.out, f"{name}.jsonl.gz")
        print(f"{path}: {write_jsonl(path, examples)} pairs")


if __name__ == "__main__":
    main()
