"""Random sampling of phrases and clauses, and one generator per category of
the corpus (`GENERATORS`)."""

import dataclasses
import functools

from keras_transformer.datasets.synthetic_en_de.numbers import english_cardinal
from keras_transformer.datasets.synthetic_en_de.numbers import german_cardinal
from keras_transformer.datasets.synthetic_en_de.dates import ANALOG_MINUTES
from keras_transformer.datasets.synthetic_en_de.dates import analog_time
from keras_transformer.datasets.synthetic_en_de.dates import date_phrase
from keras_transformer.datasets.synthetic_en_de.dates import digital_time
from keras_transformer.datasets.synthetic_en_de.dates import MONTHS
from keras_transformer.datasets.synthetic_en_de.dates import WEEKDAYS
from keras_transformer.datasets.synthetic_en_de.lexicon import ADJECTIVE_SETS
from keras_transformer.datasets.synthetic_en_de.lexicon import AUXILIARIES
from keras_transformer.datasets.synthetic_en_de.lexicon import CITIES
from keras_transformer.datasets.synthetic_en_de.lexicon import clock_adverb
from keras_transformer.datasets.synthetic_en_de.lexicon import date_adverb
from keras_transformer.datasets.synthetic_en_de.lexicon import MODALS
from keras_transformer.datasets.synthetic_en_de.lexicon import NAMES
from keras_transformer.datasets.synthetic_en_de.lexicon import NO_PLURAL_POSSESSIVE
from keras_transformer.datasets.synthetic_en_de.lexicon import NO_POSSESSIVE
from keras_transformer.datasets.synthetic_en_de.lexicon import noun_phrase
from keras_transformer.datasets.synthetic_en_de.lexicon import NOUNS
from keras_transformer.datasets.synthetic_en_de.lexicon import PERSON_INDEX
from keras_transformer.datasets.synthetic_en_de.lexicon import POSSESSIVES
from keras_transformer.datasets.synthetic_en_de.lexicon import PREDICATES
from keras_transformer.datasets.synthetic_en_de.lexicon import pronoun
from keras_transformer.datasets.synthetic_en_de.lexicon import PRONOUNS
from keras_transformer.datasets.synthetic_en_de.lexicon import SAYING_VERBS
from keras_transformer.datasets.synthetic_en_de.lexicon import SEPARABLE_VERBS
from keras_transformer.datasets.synthetic_en_de.lexicon import SIMPLE_TIMES
from keras_transformer.datasets.synthetic_en_de.lexicon import time_adverb
from keras_transformer.datasets.synthetic_en_de.lexicon import TimeAdverb
from keras_transformer.datasets.synthetic_en_de.lexicon import VERBS
from keras_transformer.datasets.synthetic_en_de.clauses import Clause
from keras_transformer.datasets.synthetic_en_de.clauses import sentence
from keras_transformer.datasets.synthetic_en_de.clauses import simple_sentence
from keras_transformer.datasets.synthetic_en_de.clauses import subordinate_sentence


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
    if noun.en in NO_POSSESSIVE or (plural and noun.en in NO_PLURAL_POSSESSIVE):
        options = tuple(d for d in options if d not in POSSESSIVES)
    det = rng.choice(options)
    return noun_phrase(noun.en, det=det, adjective=adjective, plural=plural)


def _sample_subject(rng, kinds=frozenset({"person"}), *, pronoun_p=0.4):
    if "person" in kinds and rng.random() < pronoun_p:
        r = rng.random()
        if r < 0.75:
            return PRONOUNS[rng.choice(tuple(PRONOUNS))]
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
    options = [t for t, (_, tenses) in SIMPLE_TIMES.items()
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
        return sentence(
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
        return sentence(
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
                return sentence(f"{en_day} {en_verb} {weekday_en}",
                                 f"{de_day} {de_verb} {weekday_de}")
            en_date = f"{weekday_en}, {date_phrase(day, month)[0]}"
            de_date = f"{weekday_de}, {de_date}"
        return sentence(f"{en_day} {en_verb} {en_date}",
                         f"{de_day} {de_verb} {de_date}")
    when = date_adverb(day, month, style=style)
    if r < 0.35:  # "I was born on ..."
        subject = _sample_subject(rng, pronoun_p=0.6)
        en_be = "was" if subject.person in ("1sg", "3sg") else "were"
        de_be = AUXILIARIES["sein"][PERSON_INDEX[subject.person]]
        return sentence(f"{subject.en} {en_be} born {when.en}",
                         f"{subject.de_nominative} {de_be} {when.de} geboren")
    if r < 0.5:  # "My birthday is on ..."
        owners = [("my", "mein"), ("your", "dein"), ("his", "sein"),
                  ("her", "ihr")]
        owners += [(f"{name}'s", _german_genitive(name)) for name in NAMES]
        en_owner, de_owner = rng.choice(owners)
        return sentence(f"{en_owner} birthday is {when.en}",
                         f"{de_owner} Geburtstag ist {when.de}")
    if r < 0.7:  # "The concert is on Friday, the third of May."
        noun = rng.choice(_nouns_of({"event"}))
        det = "the" if noun.en in NO_POSSESSIVE else rng.choice(
            ("the", "the", "my", "our"))
        subject = noun_phrase(noun.en, det=det)
        s = rng.random()
        if s < 0.3:
            when = time_adverb(f"on {rng.choice(WEEKDAYS)[0]}")
        elif s < 0.5:
            when = date_adverb(day, month, weekday=rng.randrange(7))
        return sentence(f"{subject.en} is {when.en}",
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
        return sentence(f"it is {en}", f"es ist {de}")
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
    clause = _sample_clause(rng, verbs=list(SEPARABLE_VERBS), time_p=0.5)
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
    if rng.random() < 0.5 and subject.en in PRONOUNS:
        # a noun subject exercises nominative endings: "Der alte Mann ..."
        subject = _sample_noun_phrase(
            rng, rng.choice(_nouns_of({"person"})), adjective_p=0.7)
    obj = _sample_object(rng, verb, subject, adjective_p=0.8)
    mode = "want" if rng.random() < 0.2 and "modal" in verb.tenses else "present"
    return simple_sentence(Clause(subject, verb, obj, mode=mode))


GENERATORS = {
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
assert tuple(GENERATORS) == CATEGORIES
