"""Text pairs to the training format, as a KerasHub `Seq2SeqLMPreprocessor`."""

import keras
import keras_hub
from keras_hub.src.utils.tensor_utils import preprocessing_function

from keras_transformer.hub.backbone import TransformerBackbone
from keras_transformer.hub.tokenizer import TransformerTokenizer


def _pack(ids, length, start_id=None, end_id=None, pad_id=0):
    """Ragged ids to (batch, length) int32: `start_id` first, the ids cut to
    fit, `end_id` last, then pad."""
    import tensorflow as tf

    room = length - (start_id is not None) - (end_id is not None)
    ids = ids[:, :room]
    batch = ids.nrows()
    parts = [ids]
    if start_id is not None:
        parts.insert(0, tf.fill([batch, 1], tf.constant(start_id, ids.dtype)))
    if end_id is not None:
        parts.append(tf.fill([batch, 1], tf.constant(end_id, ids.dtype)))
    packed = tf.concat(parts, axis=1) if len(parts) > 1 else ids
    return tf.cast(packed.to_tensor(default_value=pad_id, shape=[None, length]), tf.int32)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSeq2SeqLMPreprocessor(keras_hub.models.Seq2SeqLMPreprocessor):
    """`{"encoder_text", "decoder_text"}` strings to `(x, y, sample_weight)`
    in the format the package trains on (keras_transformer.data.pipeline):
    `x = {"encoder_token_ids": source + EOS, "decoder_token_ids": BOS +
    target}`, `y = target + EOS`, `sample_weight` 1 where `y` is not
    padding; each padded (pad id 0) to its sequence length, longer texts
    cut (EOS kept). Runs in TensorFlow (eagerly or in `tf.data`).

    Args:
        tokenizer: a `TransformerTokenizer`.
        encoder_sequence_length, decoder_sequence_length: the padded lengths
            (EOS and BOS included).
    """

    backbone_cls = TransformerBackbone
    tokenizer_cls = TransformerTokenizer

    def build(self, input_shape):
        self.built = True  # packing needs no layer of its own

    @preprocessing_function
    def call(self, x, y=None, sample_weight=None, *, encoder_sequence_length=None,
             decoder_sequence_length=None, sequence_length=None):
        import tensorflow as tf

        encoder_length = encoder_sequence_length or self.encoder_sequence_length
        decoder_length = decoder_sequence_length or sequence_length or self.decoder_sequence_length
        tokenizer = self.tokenizer
        source = tokenizer(tf.reshape(x["encoder_text"], [-1]))
        target = tokenizer(tf.reshape(x["decoder_text"], [-1]))
        # BOS + target + EOS cut to decoder_length + 1: its first decoder_length
        # ids are the decoder's input, its last decoder_length the labels.
        both = _pack(target, decoder_length + 1, tokenizer.start_token_id, tokenizer.end_token_id,
                     tokenizer.pad_token_id)
        decoder_ids = both[:, :-1]
        # The pipeline's decoder input has no EOS (padding where a short target's EOS falls).
        decoder_ids = tf.where(tf.equal(decoder_ids, tokenizer.end_token_id), tokenizer.pad_token_id, decoder_ids)
        inputs = {
            "encoder_token_ids": _pack(source, encoder_length, end_id=tokenizer.end_token_id,
                                       pad_id=tokenizer.pad_token_id),
            "decoder_token_ids": decoder_ids,
        }
        labels = both[:, 1:]
        weights = tf.cast(tf.not_equal(labels, tokenizer.pad_token_id), "float32")
        return keras.utils.pack_x_y_sample_weight(inputs, labels, weights)
