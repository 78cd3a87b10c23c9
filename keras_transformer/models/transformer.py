"""The encoder-decoder Transformer model (paper section 3, Figure 1)."""

import keras
from keras import ops

from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.embeddings import (
    LearnedPositionalEmbedding,
    SharedEmbedding,
    SINUSOID_LAYOUTS,
    SinusoidalPositionalEncoding,
)
from keras_transformer.layers.encoder import Encoder
from keras_transformer.layers.masks import decoder_self_attention_mask, padding_mask
from keras_transformer.models.presets import PRESETS
from keras_transformer.data.special_tokens import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """Encoder-decoder Transformer with a shared, tied token embedding.

    Called on `{"source": (batch, source_length) int ids, "target": (batch,
    target_length) int ids}` where `pad_id` marks padding; returns float32
    logits of shape (batch, target_length, vocabulary_size). Every mask is
    derived from the pad ids: source padding for encoder self-attention and
    cross-attention, causal plus target padding for decoder self-attention.

    Args:
        vocabulary_size: size of the (shared) vocabulary.
        d_model, num_heads, d_ff, num_encoder_layers, num_decoder_layers: sizes.
        dropout: P_drop on every sub-layer output and on embeddings + positions.
        attention_dropout, activation_dropout: extra dropouts (0 in the paper).
        norm_first: False for the paper's post-LN, True for pre-LN.
        positional_encoding: "sinusoidal" (the paper) or "learned".
        max_length: longest sequence for learned positions.
        source_vocabulary_size: give a separate source embedding of this size
            when source and target do not share a vocabulary. By default one
            embedding serves source, target and the output projection.
        pad_id: id of the padding token.
        key_dim: d_k, the width of each head's queries and keys; None (the
            paper's base) for d_model / num_heads. d_v stays d_model / num_heads.
        activation: the feed-forward activation, "relu" in the paper ("gelu"
            is the exact erf form; "swish" = "silu").
        layer_norm_epsilon: every LayerNorm's epsilon (Marian's: 1e-5).
        output_bias: add a learned (vocabulary_size,) bias to the output
            logits (Marian's `final_logits_bias`); the model's `output_bias`
            is that variable (None without the option).
        sinusoid_layout: "interleaved" (the paper: sine and cosine
            alternate) or "concatenated" (Marian: the sines, then the
            cosines); see `SinusoidalPositionalEncoding`.
    """

    def __init__(
        self,
        vocabulary_size,
        d_model=512,
        num_heads=8,
        d_ff=2048,
        num_encoder_layers=6,
        num_decoder_layers=6,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation="relu",
        norm_first=False,
        layer_norm_epsilon=1e-6,
        positional_encoding="sinusoidal",
        max_length=1024,
        source_vocabulary_size=None,
        pad_id=PAD_ID,
        key_dim=None,
        output_bias=False,
        sinusoid_layout="interleaved",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if positional_encoding not in ("sinusoidal", "learned"):
            raise ValueError(
                "`positional_encoding` must be 'sinusoidal' or 'learned', "
                f"got {positional_encoding!r}."
            )
        if sinusoid_layout not in SINUSOID_LAYOUTS:
            raise ValueError(
                f"`sinusoid_layout` must be one of {', '.join(map(repr, SINUSOID_LAYOUTS))}, "
                f"got {sinusoid_layout!r}."
            )
        if not isinstance(output_bias, bool):
            raise ValueError(f"`output_bias` must be True or False, got {output_bias!r}.")
        self.vocabulary_size = int(vocabulary_size)
        self.d_model = int(d_model)
        self.num_heads = int(num_heads)
        self.d_ff = int(d_ff)
        self.num_encoder_layers = int(num_encoder_layers)
        self.num_decoder_layers = int(num_decoder_layers)
        self.dropout = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.activation_dropout = float(activation_dropout)
        self.activation = activation
        self.norm_first = bool(norm_first)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.positional_encoding = positional_encoding
        self.max_length = int(max_length)
        self.source_vocabulary_size = (
            None if source_vocabulary_size is None else int(source_vocabulary_size)
        )
        self.pad_id = int(pad_id)
        self.key_dim = None if key_dim is None else int(key_dim)
        self.use_output_bias = output_bias
        self.sinusoid_layout = sinusoid_layout

        policy = self.dtype_policy
        self.target_embedding = SharedEmbedding(
            self.vocabulary_size, self.d_model, output_bias=output_bias, dtype=policy, name="shared_embedding"
        )
        if self.source_vocabulary_size is None:
            self.source_embedding = self.target_embedding
        else:
            self.source_embedding = SharedEmbedding(
                self.source_vocabulary_size, self.d_model, dtype=policy, name="source_embedding"
            )
        if positional_encoding == "sinusoidal":
            self.position_encoding = SinusoidalPositionalEncoding(
                layout=self.sinusoid_layout, dtype=policy, name="positions"
            )
        else:
            self.position_encoding = LearnedPositionalEmbedding(
                self.max_length, self.d_model, dtype=policy, name="positions"
            )
        self.source_dropout = keras.layers.Dropout(self.dropout, dtype=policy, name="source_dropout")
        self.target_dropout = keras.layers.Dropout(self.dropout, dtype=policy, name="target_dropout")
        stack_config = dict(
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            activation_dropout=self.activation_dropout,
            activation=self.activation,
            norm_first=self.norm_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
            key_dim=self.key_dim,
            dtype=policy,
        )
        self.encoder = Encoder(self.num_encoder_layers, name="encoder", **stack_config)
        self.decoder = Decoder(self.num_decoder_layers, name="decoder", **stack_config)

    @property
    def output_bias(self):
        """The (vocabulary_size,) bias added to the output logits, or None (see `output_bias=`)."""
        return self.target_embedding.output_bias

    @classmethod
    def from_preset(cls, name, vocabulary_size, **overrides):
        """A built model of a named size: "base" or "big" (paper, Table 3), or "tiny"."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
        config = dict(PRESETS[name])
        config.update(overrides)
        model = cls(vocabulary_size=vocabulary_size, **config)
        model.build()
        return model

    def build(self, inputs_shape=None):
        hidden_shape = (None, None, self.d_model)
        self.target_embedding.build()
        if self.source_embedding is not self.target_embedding:
            self.source_embedding.build()
        if not self.position_encoding.built:
            self.position_encoding.build(hidden_shape)
        self.encoder.build(hidden_shape)
        self.decoder.build(hidden_shape, hidden_shape)
        self.built = True

    def _embed(self, ids, embedding, dropout, start_index, training):
        x = embedding(ids)
        x = x + self.position_encoding(x, start_index=start_index)
        return dropout(x, training=training)

    def encode(self, source_ids, training=False):
        """(batch, source_length) ids -> (batch, source_length, d_model)."""
        x = self._embed(source_ids, self.source_embedding, self.source_dropout, 0, training)
        return self.encoder(
            x, attention_mask=padding_mask(source_ids, self.pad_id), training=training
        )

    def decode(
        self,
        target_ids,
        encoder_output=None,
        source_ids=None,
        training=False,
        return_attention_weights=False,
    ):
        """Target ids and the encoder output -> float32 logits (batch, target_length, vocabulary).

        `source_ids` supplies the source padding mask. With
        `return_attention_weights` the cross-attention weights (num_layers,
        batch, heads, target, source) come last. For decoding one position
        at a time, see `incremental_decoder`.
        """
        y = self._embed(target_ids, self.target_embedding, self.target_dropout, 0, training)
        self_mask = decoder_self_attention_mask(target_ids, self.pad_id)
        cross_mask = None if source_ids is None else padding_mask(source_ids, self.pad_id)
        results = self.decoder(
            y,
            encoder_output,
            self_attention_mask=self_mask,
            cross_attention_mask=cross_mask,
            training=training,
            return_attention_weights=return_attention_weights,
        )
        hidden = results[0] if return_attention_weights else results
        logits = ops.cast(self.target_embedding.logits(hidden), "float32")
        return (logits, results[1]) if return_attention_weights else logits

    def incremental_decoder(self, source_ids, beam_size=1, buffer_length=None, jit_compile=False, use_cache=True):
        """The one step API of decoding: an object with `initial_state`,
        `step(state, last_tokens, step) -> (logits, state)` and
        `reorder(state, rows)`, over `source_ids` (batch, source_length)
        with `beam_size` rows per sentence and room for `buffer_length`
        target positions; `jit_compile`: the layout of a search compiled
        with XLA (the searches' switch of the same name). Greedy and beam search, the exports and the CTranslate2
        comparison all decode through it; see
        `keras_transformer.models.incremental`.
        """
        from keras_transformer.models import incremental

        if buffer_length is None:
            raise ValueError("`buffer_length` (the number of target positions to make room for) is required.")
        if not use_cache:
            return incremental.RecomputingDecoder(self, source_ids, beam_size, buffer_length)
        return incremental.IncrementalDecoder(self, source_ids, beam_size, buffer_length, jit_compile)

    def call(self, inputs, training=None):
        if isinstance(inputs, dict):
            try:
                source_ids, target_ids = inputs["source"], inputs["target"]
            except KeyError as error:
                raise ValueError(
                    "Transformer inputs must be a dict with keys 'source' and 'target', "
                    f"got keys {sorted(inputs)}."
                ) from error
        elif isinstance(inputs, (list, tuple)) and len(inputs) == 2:
            source_ids, target_ids = inputs
        else:
            raise ValueError(
                "Transformer inputs must be {'source': ids, 'target': ids} or a "
                f"(source, target) pair, got {type(inputs).__name__}."
            )
        encoder_output = self.encode(source_ids, training=training)
        return self.decode(target_ids, encoder_output, source_ids, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "d_ff": self.d_ff,
                "num_encoder_layers": self.num_encoder_layers,
                "num_decoder_layers": self.num_decoder_layers,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation_dropout": self.activation_dropout,
                "activation": self.activation,
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "positional_encoding": self.positional_encoding,
                "max_length": self.max_length,
                "source_vocabulary_size": self.source_vocabulary_size,
                "pad_id": self.pad_id,
                "key_dim": self.key_dim,
                "output_bias": self.use_output_bias,
                "sinusoid_layout": self.sinusoid_layout,
            }
        )
        return config
