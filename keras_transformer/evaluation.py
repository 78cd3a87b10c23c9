"""Corpus evaluation with sacreBLEU: detokenized BLEU with its signature, chrF,
and a tokenized BLEU for comparison with the paper's figures.

The paper's 27.3 (base) and 28.4 (big) are BLEU on tokenized, compound-split
text (tensor2tensor's get_ende_bleu.sh), typically 0.5-1 point above
sacreBLEU's detokenized score. `bleu_tokenized` here is sacreBLEU's BLEU with
its "intl" tokenizer (Unicode punctuation and symbols split) and no compound
splitting: closer to the paper's setting, still not identical. Never mix the
two kinds in one table.
"""

import sacrebleu


def _check(hypotheses, references):
    hypotheses = list(hypotheses)
    references = list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"corpus_scores: {len(hypotheses)} hypotheses but {len(references)} references; "
            "they must be aligned one to one."
        )
    for name, texts in (("hypotheses", hypotheses), ("references", references)):
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"corpus_scores: {name}[{index}] is {type(text).__name__}, not str.")
    return hypotheses, references


def corpus_scores(hypotheses, references, tokenized_bleu=True):
    """sacreBLEU scores of a translated corpus (one reference per sentence).

    Returns a dict: "bleu" (detokenized, sacreBLEU's default 13a tokenizer)
    and "bleu_signature"; "chrf" and "chrf_signature"; with `tokenized_bleu`,
    "bleu_tokenized" and its signature (intl tokenizer, see module notes).
    """
    hypotheses, references = _check(hypotheses, references)
    bleu = sacrebleu.BLEU()
    chrf = sacrebleu.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    result = {
        "bleu": bleu_score.score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf": chrf_score.score,
        "chrf_signature": str(chrf.get_signature()),
    }
    if tokenized_bleu:
        intl = sacrebleu.BLEU(tokenize="intl")
        result["bleu_tokenized"] = intl.corpus_score(hypotheses, [references]).score
        result["bleu_tokenized_signature"] = str(intl.get_signature())
    return result
