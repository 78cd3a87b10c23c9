"""Translating strings with a run's decoding settings (the `decoding` section of its config).

Used by training's validation translations, `evaluate`, the command line and
the recipes.
"""

import keras


def with_target_language(tokenizer, decoding):
    """The tokenizer that puts `decoding.target_language`'s code (`>>deu<<`)
    before every source: an imported multilingual Marian model's option."""
    from keras_transformer.run.data import RunError

    language = decoding.get("target_language")
    if not language:
        return tokenizer
    if not hasattr(tokenizer, "with_target_language"):
        raise RunError(f"decoding.target_language {language}: the run's tokenizer has no language codes "
                       "(only imported multilingual Marian models have them)")
    try:
        return tokenizer.with_target_language(language)
    except ValueError as error:
        raise RunError(f"decoding.target_language: {error}") from None


def make_translator(model, tokenizer, decoding, max_source_length=None, **options):
    """A `Translator` with the run's decoding settings (`options` add
    search="sampling", temperature, top_k, top_p, seed, no_repeat_ngram_size)."""
    from keras_transformer.decoding.translate import Translator

    return Translator(
        model,
        with_target_language(tokenizer, decoding),
        beam_size=decoding["beam_size"],
        alpha=decoding["alpha"],
        max_extra_length=decoding["max_extra_length"],
        batch_size=decoding["batch_size"],
        max_source_length=max_source_length,
        limit_rule=decoding["limit_rule"],
        length_penalty=decoding["length_penalty"],
        **options,
    )


def translate_texts(model, tokenizer, texts, decoding, progress=False, max_source_length=None,
                    truncated=None):
    """Strings in, strings out, with the run's decoding settings.

    Sources longer than `max_source_length` tokens (EOS included) are
    truncated, as the exported SavedModel does; their indices are appended
    to the list `truncated` when one is given. With `progress`, a Keras
    progress bar counts sentences (long corpora).
    """
    translator = make_translator(model, tokenizer, decoding, max_source_length)
    texts = list(texts)
    bar = keras.utils.Progbar(len(texts), unit_name="sentence") if progress else None
    chunk = decoding["batch_size"] * 4 if progress else max(len(texts), 1)
    outputs = []
    for start in range(0, len(texts), chunk):
        outputs.extend(translator.translate(texts[start : start + chunk]))
        if truncated is not None:
            truncated.extend(start + index for index in translator.last_truncated)
        if bar is not None:
            bar.update(len(outputs))
    return outputs
