"""The Transformer as a KerasHub `Backbone`."""

import keras
import keras_hub

from keras_transformer.hub import manifest
from keras_transformer.models.transformer import Transformer

# Keys of a Transformer's config that are Keras', not the model's.
_KERAS_KEYS = ("name", "trainable", "dtype")


def _model_options(transformer):
    config = transformer.get_config()
    return {key: value for key, value in config.items() if key not in _KERAS_KEYS}


def copy_weights(source, target):
    """Every weight of Transformer `source` into Transformer `target` of the
    same config, layer by layer, as Keras saves and loads them: a LoRA
    layer's kernel is saved merged (kernel + its low-rank update)."""
    pairs = list(zip(source._flatten_layers(), target._flatten_layers()))
    for from_layer, to_layer in pairs:
        if type(from_layer) is not type(to_layer):
            raise ValueError(f"copy_weights: the models differ at {from_layer.name} / {to_layer.name}.")
    for from_layer, to_layer in pairs:
        store = {}
        from_layer.save_own_variables(store)
        if store:
            to_layer.load_own_variables(store)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerBackbone(keras_hub.models.Backbone):
    """The encoder-decoder Transformer as a KerasHub backbone.

    A functional model over one `keras_transformer.Transformer` (the
    attribute `transformer`: its layers are the backbone's, its weights the
    backbone's weights): `{"encoder_token_ids": (batch, source_length),
    "decoder_token_ids": (batch, target_length)}` int ids, pad id 0, to the
    Transformer's float32 logits (batch, target_length, vocabulary). The
    masks come from the pad ids, as in `Transformer`. `token_embedding` is
    the shared embedding (target side and output projection).

    Args:
        vocabulary_size: the Transformer's.
        dtype: the Keras dtype policy.
        **model_options: the other arguments of `Transformer` (d_model,
            num_heads, ...); the config of the backbone is theirs.
    """

    def __init__(self, vocabulary_size, dtype=None, **model_options):
        keras_options = {key: model_options.pop(key) for key in ("name", "trainable") if key in model_options}
        transformer = Transformer(vocabulary_size, dtype=dtype, name="transformer", **model_options)
        transformer.build()
        self.transformer = transformer
        self.token_embedding = transformer.target_embedding
        inputs = {
            "encoder_token_ids": keras.Input(shape=(None,), dtype="int32", name="encoder_token_ids"),
            "decoder_token_ids": keras.Input(shape=(None,), dtype="int32", name="decoder_token_ids"),
        }
        logits = transformer({"source": inputs["encoder_token_ids"], "target": inputs["decoder_token_ids"]})
        super().__init__(inputs=inputs, outputs=logits, dtype=dtype, **keras_options)
        self.model_options = _model_options(transformer)

    def get_config(self):
        config = super().get_config()
        config.update(self.model_options)
        return config

    @classmethod
    def from_transformer(cls, model, **kwargs):
        """A backbone of `model`'s config holding a copy of its weights."""
        backbone = cls(**_model_options(model), **kwargs)
        copy_weights(model, backbone.transformer)
        return backbone

    def to_transformer(self):
        """A new `Transformer` of this config with a copy of the weights
        (LoRA updates merged into the kernels)."""
        model = Transformer.from_config(self.transformer.get_config())
        model.build()
        copy_weights(self.transformer, model)
        return model

    def load_weights(self, filepath, *args, **kwargs):
        # The one loading step of a backbone-only preset: check the folder first.
        manifest.check_folder_of(filepath)
        return super().load_weights(filepath, *args, **kwargs)

    def save_to_preset(self, preset_dir, max_shard_size=10):
        super().save_to_preset(preset_dir, max_shard_size=max_shard_size)
        manifest.write(preset_dir)
