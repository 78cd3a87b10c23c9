"""Clauses and the sentences built from them: German verb-second, verb-final
(modals, perfect, subordinate clauses) and separable-verb word order."""

import dataclasses

from keras_transformer.datasets.synthetic_en_de.lexicon import AUXILIARIES
from keras_transformer.datasets.synthetic_en_de.lexicon import MODALS
from keras_transformer.datasets.synthetic_en_de.lexicon import PERSON_INDEX
from keras_transformer.datasets.synthetic_en_de.lexicon import Phrase
from keras_transformer.datasets.synthetic_en_de.lexicon import SAYING_VERBS
from keras_transformer.datasets.synthetic_en_de.lexicon import TimeAdverb
from keras_transformer.datasets.synthetic_en_de.lexicon import Verb


def capitalise(text):
    return text[:1].upper() + text[1:]


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
    v, index = clause.verb, PERSON_INDEX[clause.subject.person]
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
    finite = AUXILIARIES[v.de_auxiliary][index]
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


def sentence(english, german, mark="."):
    return capitalise(english) + mark, capitalise(german) + mark


def simple_sentence(clause, *, fronted=False):
    """(English, German) sentence for one clause."""
    return sentence(*_render_main(clause, fronted=fronted))


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
        de_verb = de_forms.split()[PERSON_INDEX[main.person]]
        return sentence(f"{main.en} {en_verb} that {sub_en}",
                         f"{main.de_nominative} {de_verb}, dass {sub_de}")
    if subordinate_first:
        if conjunction != "when":
            raise ValueError("only a 'when' clause is fronted")
        return sentence(*_render_inverted_after(
            main, f"when {sub_en}", f"wenn {sub_de}"))
    main_en, main_de = _render_main(main)
    return sentence(f"{main_en} {conjunction} {sub_en}",
                     f"{main_de}, {de_conj} {sub_de}")
