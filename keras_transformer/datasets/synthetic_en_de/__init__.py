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

Modules: `numbers` (cardinals, ordinals), `dates` (dates, clock times),
`lexicon` (the bilingual tables, noun phrases, time adverbials), `clauses`
(word order), `sampling` (random phrases, one generator per category),
`generate` (the public API) and `__main__` (the command line).

Pure Python; no TensorFlow or Keras needed.
"""

from keras_transformer.datasets.synthetic_en_de.numbers import english_cardinal
from keras_transformer.datasets.synthetic_en_de.numbers import english_ordinal
from keras_transformer.datasets.synthetic_en_de.numbers import german_cardinal
from keras_transformer.datasets.synthetic_en_de.numbers import german_ordinal
from keras_transformer.datasets.synthetic_en_de.dates import analog_time
from keras_transformer.datasets.synthetic_en_de.dates import date_phrase
from keras_transformer.datasets.synthetic_en_de.dates import digital_time
from keras_transformer.datasets.synthetic_en_de.lexicon import Phrase
from keras_transformer.datasets.synthetic_en_de.lexicon import TimeAdverb
from keras_transformer.datasets.synthetic_en_de.lexicon import VERBS
from keras_transformer.datasets.synthetic_en_de.lexicon import clock_adverb
from keras_transformer.datasets.synthetic_en_de.lexicon import date_adverb
from keras_transformer.datasets.synthetic_en_de.lexicon import noun_phrase
from keras_transformer.datasets.synthetic_en_de.lexicon import pronoun
from keras_transformer.datasets.synthetic_en_de.lexicon import time_adverb
from keras_transformer.datasets.synthetic_en_de.clauses import Clause
from keras_transformer.datasets.synthetic_en_de.clauses import simple_sentence
from keras_transformer.datasets.synthetic_en_de.clauses import subordinate_sentence
from keras_transformer.datasets.synthetic_en_de.sampling import CATEGORIES
from keras_transformer.datasets.synthetic_en_de.sampling import DEFAULT_WEIGHTS
from keras_transformer.datasets.synthetic_en_de.sampling import MAX_ENGLISH_WORDS
from keras_transformer.datasets.synthetic_en_de.generate import Example
from keras_transformer.datasets.synthetic_en_de.generate import generate_examples
from keras_transformer.datasets.synthetic_en_de.generate import generate_pairs
from keras_transformer.datasets.synthetic_en_de.generate import make_splits
from keras_transformer.datasets.synthetic_en_de.generate import write_jsonl

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
