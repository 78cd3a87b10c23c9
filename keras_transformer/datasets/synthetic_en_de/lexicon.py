"""The bilingual lexicon (mostly tables): nouns with gender and plural, adjectives
and their German endings, verbs with their German forms, pronouns, names and
cities; noun phrases and time adverbials built from them."""

import dataclasses

from keras_transformer.datasets.synthetic_en_de.numbers import check_int
from keras_transformer.datasets.synthetic_en_de.numbers import english_cardinal
from keras_transformer.datasets.synthetic_en_de.numbers import german_cardinal
from keras_transformer.datasets.synthetic_en_de.dates import analog_time
from keras_transformer.datasets.synthetic_en_de.dates import date_phrase
from keras_transformer.datasets.synthetic_en_de.dates import digital_time
from keras_transformer.datasets.synthetic_en_de.dates import WEEKDAYS


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
NO_POSSESSIVE = frozenset({"man", "woman", "film"})
NO_PLURAL_POSSESSIVE = frozenset({"mother", "father"})

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
SEPARABLE_VERBS = tuple(v for v in VERBS.values() if v.de_prefix)
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
AUXILIARIES = {"haben": "habe hast hat haben".split(),
                "sein": "bin bist ist sind".split()}

# Person codes; the German verb table has four forms.
PERSON_INDEX = {"1sg": 0, "2sg": 1, "3sg": 2, "1pl": 3, "3pl": 3}


@dataclasses.dataclass(frozen=True)
class Phrase:
    """A noun phrase or pronoun: English and its German cases."""

    en: str
    de_nominative: str
    de_accusative: str
    person: str = "3sg"  # 1sg 2sg 3sg 1pl 3pl
    kind: str = "person"  # person thing animal food vehicle event ...
    key: str = ""  # identity, so a sentence does not use a noun twice


PRONOUNS = {
    "I": Phrase("I", "ich", "mich", "1sg", "person", "I"),
    "you": Phrase("you", "du", "dich", "2sg", "person", "you"),
    "he": Phrase("he", "er", "ihn", "3sg", "person", "he"),
    "she": Phrase("she", "sie", "sie", "3sg", "person", "she"),
    "we": Phrase("we", "wir", "uns", "1pl", "person", "we"),
    "they": Phrase("they", "sie", "sie", "3pl", "person", "they"),
}


def pronoun(word):
    """A subject pronoun ("I", "you", "he", "she", "we", "they") or a name."""
    if word in PRONOUNS:
        return PRONOUNS[word]
    if word in NAMES:
        return Phrase(word, word, word, "3sg", "person", word)
    raise ValueError(f"unknown pronoun or name {word!r}; pronouns: "
                     f"{sorted(PRONOUNS)}, names: {NAMES}")


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
POSSESSIVES = {"my": "mein", "your": "dein", "our": "unser"}
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
        check_int(count, 1, 9999, "count")
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
            stem = "ein" if (count == 1 or det == "a") else POSSESSIVES[det]
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


SIMPLE_TIMES = {
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
    if text in SIMPLE_TIMES:
        german, tenses = SIMPLE_TIMES[text]
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
