"""The translation task as a KerasHub `Seq2SeqLM`, generating with our searches."""

import keras
import keras_hub
import numpy as np

from keras_transformer.hub import manifest
from keras_transformer.hub.backbone import TransformerBackbone
from keras_transformer.hub.preprocessor import TransformerSeq2SeqLMPreprocessor

def default_decoding():
    """The `decoding` section's defaults (keras_transformer.config)."""
    from keras_transformer import config

    return config.defaults()["decoding"]


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSeq2SeqLM(keras_hub.models.Seq2SeqLM):
    """Translation with the Transformer, the KerasHub way.

    Called on the preprocessor's `x` it gives the backbone's logits, so
    `fit` on `{"encoder_text", "decoder_text"}` pairs trains it (KerasHub's
    default loss: cross-entropy over the non-padding labels). `generate`
    translates with the package's own cached searches
    (`keras_transformer.decoding`: beam search with the GNMT length penalty,
    greedy or sampling) through `keras_transformer.decoding.Translator`, not
    with KerasHub's samplers (its beam sampler has no length penalty).

    Args:
        backbone: a `TransformerBackbone`.
        preprocessor: a `TransformerSeq2SeqLMPreprocessor`, or None (then
            `generate` takes token ids).
        decoding: the settings of a run's `decoding` section (beam_size,
            alpha, max_extra_length, batch_size, limit_rule; defaults for
            the missing ones): what `generate` uses unless told otherwise.
        max_source_length: sources longer than this many ids (EOS included)
            are cut, as a run's `data.max_length` cuts them in `translate`.
    """

    backbone_cls = TransformerBackbone
    preprocessor_cls = TransformerSeq2SeqLMPreprocessor

    def __init__(self, backbone, preprocessor=None, decoding=None, max_source_length=None, **kwargs):
        self.backbone = backbone
        self.preprocessor = preprocessor
        inputs = backbone.input
        logits = backbone(inputs)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        unknown = sorted(set(decoding or {}) - set(default_decoding()))
        if unknown:
            raise ValueError(f"TransformerSeq2SeqLM: unknown `decoding` settings {unknown}; "
                             f"known: {sorted(default_decoding())}.")
        self.decoding = {**default_decoding(), **(decoding or {})}
        self.max_source_length = max_source_length

    def get_config(self):
        config = super().get_config()
        config.update({"decoding": dict(self.decoding), "max_source_length": self.max_source_length})
        return config

    @classmethod
    def from_transformer(cls, model, tokenizer=None, *, encoder_sequence_length=1024,
                         decoder_sequence_length=1024, **kwargs):
        """The task of a `Transformer` (its weights copied) and its
        `SubwordTokenizer` (None: no preprocessor); `kwargs` are the task's
        (decoding, max_source_length) and Keras'."""
        from keras_transformer.hub.tokenizer import TransformerTokenizer

        preprocessor = None
        if tokenizer is not None:
            preprocessor = TransformerSeq2SeqLMPreprocessor(
                TransformerTokenizer(tokenizer), encoder_sequence_length=encoder_sequence_length,
                decoder_sequence_length=decoder_sequence_length)
        return cls(TransformerBackbone.from_transformer(model), preprocessor, **kwargs)

    def save_to_preset(self, preset_dir, max_shard_size=10):
        super().save_to_preset(preset_dir, max_shard_size=max_shard_size)
        manifest.write(preset_dir)

    def translator(self, **options):
        """The `keras_transformer.decoding.Translator` that `generate` uses:
        this task's `decoding` settings and `max_source_length`, overridden
        by `options` (any of `Translator`'s)."""
        from keras_transformer.run.translate import make_translator

        decoding = dict(self.decoding)
        for key in default_decoding():  # the settings of the `decoding` section; the rest go to `Translator`
            if key in options:
                decoding[key] = options.pop(key)
        options.setdefault("max_source_length", self.max_source_length)
        tokenizer = None if self.preprocessor is None else self.preprocessor.tokenizer.subword_tokenizer
        return make_translator(self.backbone.transformer, tokenizer, decoding, **options)

    def generate(self, inputs, max_length=None, **options):
        """Translates with the package's searches.

        Args:
            inputs: a string or a list of strings (needs the preprocessor);
                or token ids as the preprocessor packs them, `{"encoder_token_ids":
                (batch, length)}` or the array itself (source ids, EOS, pad 0).
            max_length: the longest output, in tokens with EOS (None: the
                source length + `max_extra_length`).
            **options: `Translator`'s: search ("beam", "greedy",
                "sampling"), beam_size, alpha, max_extra_length, limit_rule,
                temperature, top_k, top_p, seed, no_repeat_ngram_size, ...

        Returns:
            Strings (a string for a string); for token ids, a list of
            output id lists (without BOS and EOS).
        """
        translator = self.translator(max_output_length=max_length, **options)
        if isinstance(inputs, (list, tuple)) and not inputs:
            return []
        if isinstance(inputs, str) or (isinstance(inputs, (list, tuple))
                                       and all(isinstance(text, str) for text in inputs)):
            if self.preprocessor is None:
                raise ValueError("generate: texts need a preprocessor; this task has none (pass token ids).")
            return translator.translate(inputs if isinstance(inputs, str) else list(inputs))
        if isinstance(inputs, dict):
            inputs = inputs["encoder_token_ids"]
        rows = np.asarray(keras.ops.convert_to_numpy(inputs))
        if rows.ndim != 2 or not np.issubdtype(rows.dtype, np.integer):
            raise ValueError(f"generate: token ids must be a 2-D int array, got {rows.dtype} of shape {rows.shape}.")
        sources = [[int(i) for i in row if i != translator.pad_id] for row in rows]
        return translator.translate_ids(sources)[0]
