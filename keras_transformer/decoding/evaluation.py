"""Evaluation of translations with sacreBLEU.

- `corpus_scores` (from `keras_transformer.evaluation`): detokenized sacreBLEU
  with its signature (the score to report), chrF, and BLEU with sacreBLEU's
  "intl" tokenizer.
- `compound_split_bleu`: tokenized BLEU the way tensor2tensor's
  `get_ende_bleu.sh` computed the paper's 27.3 / 28.4 (tokenize, split
  hyphenated compounds as "##AT##-##AT##", multi-bleu.perl: no smoothing),
  with sacreBLEU's 13a tokenizer standing in for Moses' tokenizer.perl. It is
  comparable in kind with the paper's figures, not with sacreBLEU's; never
  mix the two in one table.
- `evaluate`: translate sources with a model and score them.
"""

import re

import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from keras_transformer.evaluation import corpus_scores

# tensor2tensor's get_ende_bleu.sh: perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'
_COMPOUND = re.compile(r"(\S)-(\S)")

COMPOUND_SPLIT_LABEL = "tokenized BLEU (13a tokens, ##AT## compound splitting, no smoothing; tensor2tensor-style)"


def split_compounds(text):
    """"rich-text" -> "rich ##AT##-##AT## text" (non-overlapping, as perl's s///g)."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", text)


def compound_split_bleu(hypotheses, references):
    """Tokenized, compound-split BLEU (see the module notes).

    Args:
        hypotheses: detokenized translations (strings).
        references: one detokenized reference per hypothesis.

    Returns:
        A dict with "bleu_compound_split" (0-100) and "bleu_compound_split_label".
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"compound_split_bleu: {len(hypotheses)} hypotheses but {len(references)} references; "
            "they must be aligned one to one."
        )
    tokenize = Tokenizer13a()

    def prepare(texts, name):
        prepared = []
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"compound_split_bleu: {name}[{index}] is {type(text).__name__}, not str.")
            prepared.append(split_compounds(tokenize(text.strip())))
        return prepared

    bleu = sacrebleu.BLEU(tokenize="none", smooth_method="none", force=True)
    score = bleu.corpus_score(prepare(hypotheses, "hypotheses"), [prepare(references, "references")])
    return {"bleu_compound_split": score.score, "bleu_compound_split_label": COMPOUND_SPLIT_LABEL}


def evaluate(model, tokenizer, sources, references, *, compound_split=True, **translate_options):
    """Translates `sources` and scores them against `references`.

    `translate_options` go to `Translator` (beam_size=4, alpha=0.6,
    max_extra_length=50, batch_size=32, ...). Returns the dict of
    `corpus_scores` (detokenized sacreBLEU + signature, chrF, intl BLEU),
    plus the compound-split BLEU unless `compound_split=False`, and the
    "translations".
    """
    from keras_transformer.decoding.translate import Translator

    sources, references = list(sources), list(references)
    if len(sources) != len(references):
        raise ValueError(
            f"evaluate: {len(sources)} sources but {len(references)} references; "
            "they must be aligned one to one."
        )
    translations = Translator(model, tokenizer, **translate_options).translate(sources)
    scores = corpus_scores(translations, references)
    if compound_split:
        scores.update(compound_split_bleu(translations, references))
    scores["translations"] = translations
    return scores
