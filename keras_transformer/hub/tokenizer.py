"""Our SentencePiece tokenizer as a KerasHub `Tokenizer`."""

import os

import keras
import keras_hub

from keras_transformer.hub import manifest
from keras_transformer.hub.backbone import TransformerBackbone
from keras_transformer.data.special_tokens import BOS_ID, BOS_PIECE, EOS_ID, EOS_PIECE, PAD_ID, PAD_PIECE

SENTENCEPIECE_ASSET = "sentencepiece.model"


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerTokenizer(keras_hub.tokenizers.Tokenizer):
    """`keras_transformer.data.SubwordTokenizer` (TensorFlow) under
    KerasHub's tokenizer interface: `tokenize` gives ids without BOS/EOS
    (ragged for a batch), `detokenize` strings. A preset keeps the
    SentencePiece model as the asset `sentencepiece.model`.

    Args:
        proto: the SentencePiece model: a `SubwordTokenizer`, its serialized
            proto (bytes) or the path of a `.model` file; None for one whose
            assets a preset loads.
    """

    backbone_cls = TransformerBackbone

    def __init__(self, proto=None, **kwargs):
        super().__init__(**kwargs)
        self.file_assets = [SENTENCEPIECE_ASSET]
        self._subword = None
        self.start_token, self.end_token, self.pad_token = BOS_PIECE, EOS_PIECE, PAD_PIECE
        self.start_token_id, self.end_token_id, self.pad_token_id = BOS_ID, EOS_ID, PAD_ID
        self._special_token_attrs = ["start_token", "end_token", "pad_token"]
        if proto is not None:
            self.set_proto(proto)

    def set_proto(self, proto):
        from keras_transformer.data.tokenizer import SubwordTokenizer

        if isinstance(proto, SubwordTokenizer):
            self._subword = proto
        elif isinstance(proto, (bytes, bytearray)):
            self._subword = SubwordTokenizer(bytes(proto))
        else:
            self._subword = SubwordTokenizer.load(proto)

    @property
    def subword_tokenizer(self):
        """The `SubwordTokenizer` (what `Translator` and the exports take)."""
        if self._subword is None:
            raise ValueError("TransformerTokenizer has no SentencePiece model yet: pass `proto`, or load a preset.")
        return self._subword

    def save_assets(self, dir_path):
        self.subword_tokenizer.save(os.path.join(dir_path, SENTENCEPIECE_ASSET))

    def load_assets(self, dir_path):
        self.set_proto(os.path.join(dir_path, SENTENCEPIECE_ASSET))

    def load_preset_assets(self, preset):
        # Called with the preset's URI before its weights load: the moment to check its files.
        manifest.check(preset)
        super().load_preset_assets(preset)

    def tokenize(self, inputs, *args, **kwargs):
        return self.subword_tokenizer.tokenize(inputs)

    def detokenize(self, inputs, *args, **kwargs):
        return self.subword_tokenizer.detokenize(inputs)

    def vocabulary_size(self):
        return self.subword_tokenizer.vocabulary_size

    def get_vocabulary(self):
        return self.subword_tokenizer.vocabulary()

    def id_to_token(self, id):
        return self.subword_tokenizer.id_to_piece(id)

    def token_to_id(self, token):
        return self.subword_tokenizer.piece_to_id(token)
