"""Evaluation of translations with sacreBLEU: one module, no TensorFlow.

- `corpus_scores`: detokenized sacreBLEU with its signature (the score to
  report), chrF, and BLEU with sacreBLEU's "intl" tokenizer (Unicode
  punctuation and symbols split, no compound splitting).
- `compound_split_bleu`: tokenized BLEU the way tensor2tensor's
  `get_ende_bleu.sh` computed the paper's 27.3 / 28.4 (tokenize, split
  hyphenated compounds as "##AT##-##AT##", multi-bleu.perl: no smoothing),
  with sacreBLEU's 13a tokenizer standing in for Moses' tokenizer.perl,
  typically 0.5-1 point above sacreBLEU's detokenized score. It is comparable
  in kind with the paper's figures, not with sacreBLEU's; never mix the two
  in one table.
- `evaluate`: translate sources with a model (or any translate function) and
  score them; `keras_transformer.run.trained.evaluate` calls it for a run.
- `perplexity`: exp of the token-mean cross-entropy of a model over batches
  (no label smoothing, padding masked), the "PPL (dev)" of the paper's
  Table 3; `keras_transformer.run.trained.validation_perplexity` calls it for a run.
"""

import math
import re

import numpy as np
import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

__all__ = ["COMPOUND_SPLIT_LABEL", "compound_split_bleu", "corpus_scores", "evaluate", "perplexity",
           "split_compounds"]

# tensor2tensor's get_ende_bleu.sh: perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'
_COMPOUND = re.compile(r"(\S)-(\S)")

COMPOUND_SPLIT_LABEL = "tokenized BLEU (13a tokens, ##AT## compound splitting, no smoothing; tensor2tensor-style)"


def _aligned(caller, hypotheses, references, names=("hypotheses", "references")):
    """Both lists, or an error naming `caller`, the counts, or the item that is not a str."""
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{caller}: {len(hypotheses)} {names[0]} but {len(references)} {names[1]}; "
            "they must be aligned one to one."
        )
    for name, texts in zip(names, (hypotheses, references)):
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{caller}: {name}[{index}] is {type(text).__name__}, not str.")
    return hypotheses, references


def corpus_scores(hypotheses, references, tokenized_bleu=True):
    """sacreBLEU scores of a translated corpus (one reference per sentence).

    Returns a dict: "bleu" (detokenized, sacreBLEU's default 13a tokenizer)
    and "bleu_signature"; "chrf" and "chrf_signature"; with `tokenized_bleu`,
    "bleu_tokenized" and its signature (intl tokenizer, see module notes).
    """
    hypotheses, references = _aligned("corpus_scores", hypotheses, references)
    bleu = sacrebleu.BLEU()
    chrf = sacrebleu.CHRF()
    result = {
        "bleu": bleu.corpus_score(hypotheses, [references]).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf": chrf.corpus_score(hypotheses, [references]).score,
        "chrf_signature": str(chrf.get_signature()),
    }
    if tokenized_bleu:
        intl = sacrebleu.BLEU(tokenize="intl")
        result["bleu_tokenized"] = intl.corpus_score(hypotheses, [references]).score
        result["bleu_tokenized_signature"] = str(intl.get_signature())
    return result


def split_compounds(text):
    """"rich-text" -> "rich ##AT##-##AT## text" (non-overlapping, as perl's s///g)."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", text)


def compound_split_bleu(hypotheses, references):
    """Tokenized, compound-split BLEU (see the module notes).

    Returns a dict with "bleu_compound_split" (0-100) and "bleu_compound_split_label".
    """
    hypotheses, references = _aligned("compound_split_bleu", hypotheses, references)
    tokenize = Tokenizer13a()

    def prepare(texts):
        return [split_compounds(tokenize(text.strip())) for text in texts]

    bleu = sacrebleu.BLEU(tokenize="none", smooth_method="none", force=True)
    score = bleu.corpus_score(prepare(hypotheses), [prepare(references)])
    return {"bleu_compound_split": score.score, "bleu_compound_split_label": COMPOUND_SPLIT_LABEL}


def evaluate(model, tokenizer, sources, references, *, compound_split=True, translate=None,
             **translate_options):
    """Translates `sources` and scores them against `references`.

    `translate(sources) -> translations` does the translating when given
    (`run.trained.evaluate` passes its batched, truncating one); otherwise a
    `keras_transformer.decoding.Translator(model, tokenizer,
    **translate_options)` does. Returns the dict of `corpus_scores`, plus the
    compound-split BLEU unless `compound_split=False`, "exact_match" (the
    share of translations equal to their reference, spaces at the ends
    ignored) and the "translations".
    """
    sources, references = _aligned("evaluate", sources, references, ("sources", "references"))
    if translate is None:
        from keras_transformer.decoding.translate import Translator

        translate = Translator(model, tokenizer, **translate_options).translate
    translations = list(translate(sources))
    scores = corpus_scores(translations, references)
    if compound_split:
        scores.update(compound_split_bleu(translations, references))
    scores["exact_match"] = (
        sum(h.strip() == r.strip() for h, r in zip(translations, references)) / len(references)
        if references else 0.0
    )
    scores["translations"] = translations
    return scores


def perplexity(model, batches, pad_id=0):
    """Perplexity of `model` on `batches` of `(inputs, labels)`, labels (B, T) ids.

    `model(inputs, training=False)` gives logits (B, T, V). The cross-entropy
    -log softmax(logits)[label] is summed in float64 over every label that is
    not `pad_id` and divided by their count, over all batches together (a
    token mean, not a mean of batch means); no label smoothing. Returns a dict:
    "perplexity" (exp of that mean), "cross_entropy" (nats per token) and
    "tokens".
    """
    import keras

    total, tokens = 0.0, 0
    for inputs, labels in batches:
        logits = keras.ops.convert_to_numpy(keras.ops.cast(model(inputs, training=False), "float32"))
        labels = np.asarray(keras.ops.convert_to_numpy(labels))
        logits = logits.astype("float64")
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        picked = np.take_along_axis(log_probs, labels[..., None].astype("int64"), axis=-1)[..., 0]
        real = labels != pad_id
        total -= float(picked[real].sum())
        tokens += int(real.sum())
    if not tokens:
        raise ValueError("perplexity: the batches hold no target token that is not padding.")
    mean = total / tokens
    return {"perplexity": math.exp(mean), "cross_entropy": mean, "tokens": tokens}
