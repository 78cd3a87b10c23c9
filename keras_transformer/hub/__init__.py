"""The Transformer as KerasHub classes: backbone, tokenizer, preprocessor and
`Seq2SeqLM` task, and presets (`save_to_preset`, `from_preset`).

Needs the `[hub]` extra (keras-hub); the tokenizer and preprocessor need
TensorFlow (tensorflow-text's SentencePiece ops). `import keras_transformer`
registers these classes with KerasHub as soon as KerasHub is imported, so
`keras_hub.models.Seq2SeqLM.from_preset(folder)` loads a preset of ours.
"""

try:
    import keras_hub  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "keras_transformer.hub needs KerasHub: pip install 'keras-transformer-nmt[hub]'"
    ) from error

from keras_transformer.hub.backbone import TransformerBackbone
from keras_transformer.hub.manifest import PresetError
from keras_transformer.hub.preprocessor import TransformerSeq2SeqLMPreprocessor
from keras_transformer.hub.presets import save_run_preset
from keras_transformer.hub.seq2seq_lm import TransformerSeq2SeqLM
from keras_transformer.hub.tokenizer import TransformerTokenizer

__all__ = [
    "PresetError",
    "TransformerBackbone",
    "TransformerSeq2SeqLM",
    "TransformerSeq2SeqLMPreprocessor",
    "TransformerTokenizer",
    "save_run_preset",
]
