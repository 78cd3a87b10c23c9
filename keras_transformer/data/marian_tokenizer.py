"""The tokenizer of an imported Marian model (OPUS-MT, MarianMT), in the TF graph.

A Marian model segments its source with one SentencePiece model
(`source.spm`) and its target with another (`target.spm`), and maps the
pieces to ids through its own vocabulary (`vocab.json`: piece -> Marian id;
`target_vocab.json` too when the two sides have separate vocabularies). The
SentencePiece ids are never used. Marian's special ids (EOS 0, UNK 1, PAD
last) map onto ours (pad 0, unk 1, bos 2, eos 3) through
`keras_transformer.marian.ids.MarianIds`, the one home of that mapping.

`MarianTokenizer` has the interface of `SubwordTokenizer` (`tokenize`,
`detokenize`, `vocabulary_size`, the special ids, `id_to_piece`, ...), so
runs, `Translator`, the command line and the SavedModel export take it
unchanged. Everything happens in TensorFlow ops (TF Text's SentencePiece and
regex-split ops, a tracked hash table, string ops), so an exported
SavedModel still takes text and returns text without Keras or Python.

What it reproduces of Transformers' `MarianTokenizer` (checked against it in
tests/tf/test_marian_tokenizer.py; `keras_transformer.marian.pieces` states
the same rules in plain Python):
- encoding: the text is split around the special tokens written literally in
  it (`</s>`, `<unk>`, `<pad>`: they keep their ids); a part that starts with
  a language code (`>>deu<<`, up to the first `<<`) gives the code's id; the
  rest of each part is segmented by the side's SentencePiece model; each
  piece gets its vocabulary id, unknown pieces the unk id. (Transformers adds
  Moses punctuation normalisation only when `sacremoses` is installed, and
  then only in `normalize`, which its encoding does not call.) `tokenize`
  returns the ids without EOS; our callers append it, as Marian does.
- decoding (`decode(ids, skip_special_tokens=True)`): special ids are dropped,
  each piece becomes its text (`▁` a space; pieces that are control symbols of
  the decoding SentencePiece model nothing), the texts are joined and
  whitespace is stripped from both ends. As `SubwordTokenizer.detokenize`
  does, each row ends at its first EOS.

Targets (training pairs, scoring) go through `tokenize_target`: the target
SentencePiece model and, with separate vocabularies, the target vocabulary.
`with_target_language("deu")` gives a tokenizer that puts `>>deu<<` before
every source, for multilingual models.
"""

import json
import os

import numpy as np
import sentencepiece
import tensorflow as tf
from tensorflow_text.python.ops.regex_split_ops import gen_regex_split_ops

from keras_transformer.data.tokenizer import SentencePieceModelOp, _bad_texts_error, _sentencepiece_ops, ids_to_keep
from keras_transformer.marian.ids import MarianIds
from keras_transformer.marian.pieces import (  # noqa: F401  (the file names: re-exported)
    SOURCE_SPM, SPECIAL_PATTERN, SPECIAL_PIECES, TARGET_SPM, TARGET_VOCAB_FILE, UNICODE_SPACE, VOCAB_FILE, PairEncoder,
    surface,
)
from keras_transformer.data.special_tokens import (
    BOS_ID, BOS_PIECE, EOS_ID, EOS_PIECE, PAD_ID, PAD_PIECE, UNK_ID, UNK_PIECE,
)

CONFIG_FILE = "tokenizer_config.json"
# Ours, beside Transformers' files: the `MarianIds` of each side, when a model
# has a start token of its own (one written by our `marian-hf` export).
IDS_FILE = "keras_transformer_ids.json"

# A language code opens a part of the text: ">>", anything, up to the first "<<"
# (marian.pieces.language_code).
_CODE_PATTERN = r"(?s)^(>>.*?<<).*$"
_CODE_PREFIX = r"(?s)^>>.*?<<"


class MarianVocabularyError(ValueError):
    """A Marian tokenizer file that cannot be used (the message names it)."""


def _read_vocabulary(path):
    """piece -> Marian id of a `vocab.json`, checked."""
    try:
        with open(path, encoding="utf-8") as stream:
            vocabulary = json.load(stream)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file (a Marian model's vocabulary)") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise MarianVocabularyError(f"{path}: not a JSON vocabulary ({error})") from None
    return _check_vocabulary(vocabulary, path)


def _check_vocabulary(vocabulary, origin):
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise MarianVocabularyError(f"{origin}: expected a non-empty JSON object piece -> id")
    for piece, marian_id in vocabulary.items():
        if isinstance(marian_id, bool) or not isinstance(marian_id, int) or marian_id < 0:
            raise MarianVocabularyError(f"{origin}: the id of {piece!r} is {marian_id!r}, not an int >= 0")
    missing = [piece for piece in SPECIAL_PIECES if piece not in vocabulary]
    if missing:
        raise MarianVocabularyError(f"{origin}: no {', '.join(missing)} piece (Marian's special tokens)")
    if len(set(vocabulary.values())) != len(vocabulary):
        raise MarianVocabularyError(f"{origin}: two pieces share an id")
    return dict(vocabulary)


def read_spm(path):
    try:
        with open(path, "rb") as stream:
            proto = stream.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file (a Marian model's SentencePiece model)") from None
    _processor(proto, path)
    return proto


def _processor(proto, origin):
    try:
        return sentencepiece.SentencePieceProcessor(model_proto=proto)
    except Exception as error:  # sentencepiece raises bare RuntimeError
        raise MarianVocabularyError(f"{origin}: not a SentencePiece model ({error})") from None


class _Side:
    """One side's segmenter and vocabulary: SentencePiece proto, piece -> our id."""

    def __init__(self, proto, vocabulary, name, ids=None, proto_name="proto"):
        self.proto = proto
        self.processor = _processor(proto, proto_name)
        size = max(vocabulary.values()) + 1
        if ids is None:
            ids = MarianIds(size, eos_id=vocabulary[EOS_PIECE], unk_id=vocabulary[UNK_PIECE],
                            pad_id=vocabulary[PAD_PIECE])
        found = {"size": size, "eos_id": vocabulary[EOS_PIECE], "unk_id": vocabulary[UNK_PIECE],
                 "pad_id": vocabulary[PAD_PIECE]}
        expected = {"size": ids.size, "eos_id": ids.eos_id, "unk_id": ids.unk_id, "pad_id": ids.pad_id}
        if found != expected:
            raise MarianVocabularyError(
                f"{name}: the vocabulary does not match the model: it has {found}, the model {expected}")
        self.ids = ids
        self.vocabulary = vocabulary
        self.our_pieces = self._our_pieces()
        self.piece_to_our_id = {piece: int(self.ids.ours_of_marian[marian_id])
                                for piece, marian_id in vocabulary.items()}
        # As SubwordTokenizer's (tensorflow/text#570).
        self.model_op = SentencePieceModelOp(proto, "keras_transformer_marian_spm_")

    def _our_pieces(self):
        """Pieces indexed by our id; our BOS (Marian has none) gets a name no piece has."""
        marian_pieces = [None] * self.ids.size
        for piece, marian_id in self.vocabulary.items():
            marian_pieces[marian_id] = piece
        pieces = [marian_pieces[marian_id] for marian_id in self.ids.marian_of_ours]
        if self.ids.bos_id is None:
            bos = BOS_PIECE
            while bos in self.vocabulary:
                bos = "<" + bos + ">"
            pieces[BOS_ID] = bos
        # Ids the vocabulary skips (none in real models) get names too.
        return [f"<keras_transformer_unused_{i}>" if p is None else p for i, p in enumerate(pieces)]


class MarianTokenizer(tf.Module):
    """The tokenizer of a Marian model: two SentencePiece models, one or two vocabularies.

    Build one with `MarianTokenizer.load(folder)` (a MarianMT folder or a run
    directory's `marian_tokenizer/`) or from the parts.

    Args:
        source_proto, target_proto: the serialized SentencePiece models of
            the source and target sides (bytes).
        vocabulary: piece -> Marian id (`vocab.json`).
        target_vocabulary: piece -> Marian id of the target side when the
            model has separate vocabularies (`target_vocab.json`), else None.
        target_language: a language code put before every source (`"deu"`
            or `">>deu<<"`), for multilingual models; it must be a piece of
            the source vocabulary.
        source_ids, target_ids: the `MarianIds` of each side (the model's,
            from the import); by default made from the vocabulary's special
            pieces, with our BOS an extra id. A vocabulary that does not fit
            them (size, special ids) is an error.
        name: the `tf.Module` name.
    """

    pad_id = PAD_ID
    unk_id = UNK_ID
    bos_id = BOS_ID
    eos_id = EOS_ID
    model_type = "marian"

    def __init__(self, source_proto, target_proto, vocabulary, target_vocabulary=None, *,
                 target_language=None, source_ids=None, target_ids=None, name="marian_tokenizer"):
        super().__init__(name=name)
        vocabulary = _check_vocabulary(vocabulary, "vocabulary")
        if target_vocabulary is not None:
            target_vocabulary = _check_vocabulary(target_vocabulary, "target_vocabulary")
        self._source = _Side(bytes(source_proto), vocabulary, VOCAB_FILE, source_ids, "source_proto")
        if target_vocabulary is None and target_ids is None:
            target_ids = self._source.ids
        self._target = _Side(bytes(target_proto), target_vocabulary or vocabulary,
                             TARGET_VOCAB_FILE if target_vocabulary is not None else VOCAB_FILE, target_ids,
                             "target_proto")
        self._separate = target_vocabulary is not None
        self._language_piece = self._language_piece_of(target_language)
        # Transformers decodes pieces with the source model unless the
        # vocabularies are separate (MarianTokenizer._decode's default).
        decoding_side = self._target if self._separate else self._source
        surfaces = [surface(piece, decoding_side.processor) for piece in self._target.our_pieces]
        for special in (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            surfaces[special] = b""
        # Tracked tables and constants: an export carries them (ExportArchive.track).
        self._source_table = _piece_table(self._source)
        self._target_table = self._source_table if not self._separate else _piece_table(self._target)
        self._surfaces = tf.constant(surfaces, dtype=tf.string)
        self._special_pattern = SPECIAL_PATTERN

    def _language_piece_of(self, language):
        if language is None:
            return None
        if not isinstance(language, str) or not language.strip():
            raise ValueError(f"target_language must be a language code such as 'deu', got {language!r}")
        language = language.strip()
        piece = language if language.startswith(">>") and language.endswith("<<") else f">>{language}<<"
        if piece not in self._source.vocabulary:
            codes = sorted(p for p in self._source.vocabulary if p.startswith(">>") and p.endswith("<<"))
            known = (f"the model's codes: {', '.join(codes[:40])}{' ...' if len(codes) > 40 else ''}"
                     if codes else "the model has no language codes (not a multilingual model)")
            raise ValueError(f"target language {language!r}: {piece} is not in the vocabulary; {known}")
        return piece

    # Building, saving.

    @classmethod
    def load(cls, folder, *, target_language=None, source_ids=None, target_ids=None, name="marian_tokenizer"):
        """Reads `source.spm`, `target.spm`, `vocab.json` (and `target_vocab.json`
        when the folder's `tokenizer_config.json` says `separate_vocabs`, or
        the file is there) from `folder`. `source_ids`, `target_ids`: the
        model's `MarianIds` (default: those `save` wrote, or the vocabulary's)."""
        folder = os.fspath(folder)
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{folder}: no such directory (a Marian tokenizer's folder)")
        separate = os.path.isfile(os.path.join(folder, TARGET_VOCAB_FILE))
        config_path = os.path.join(folder, CONFIG_FILE)
        if os.path.isfile(config_path):
            try:
                with open(config_path, encoding="utf-8") as stream:
                    separate = bool(json.load(stream).get("separate_vocabs", separate))
            except (ValueError, UnicodeDecodeError, AttributeError) as error:
                raise MarianVocabularyError(f"{config_path}: not a JSON object ({error})") from None
        source = read_spm(os.path.join(folder, SOURCE_SPM))
        target = read_spm(os.path.join(folder, TARGET_SPM))
        vocabulary = _read_vocabulary(os.path.join(folder, VOCAB_FILE))
        target_vocabulary = _read_vocabulary(os.path.join(folder, TARGET_VOCAB_FILE)) if separate else None
        ids = {}
        ids_path = os.path.join(folder, IDS_FILE)
        if os.path.isfile(ids_path):
            try:
                with open(ids_path, encoding="utf-8") as stream:
                    ids = {f"{side}_ids": MarianIds(**fields) for side, fields in json.load(stream).items()}
            except (ValueError, TypeError, AttributeError) as error:
                raise MarianVocabularyError(f"{ids_path}: not the id mapping written by `save` ({error})") from None
        if source_ids is not None:
            ids = {"source_ids": source_ids, "target_ids": target_ids}
        try:
            return cls(source, target, vocabulary, target_vocabulary, target_language=target_language, name=name,
                       **ids)
        except MarianVocabularyError as error:
            # The message starts with the file's name.
            raise MarianVocabularyError(os.path.join(folder, str(error))) from None

    def save(self, folder):
        """Writes the files `load` reads (Transformers' MarianTokenizer reads them too)."""
        folder = os.fspath(folder)
        os.makedirs(folder, exist_ok=True)
        for file_name, data in self.files().items():
            with open(os.path.join(folder, file_name), "wb") as stream:
                stream.write(data)
        return folder

    def files(self):
        """{file name: bytes} of what `save` writes."""
        files = {SOURCE_SPM: self._source.proto, TARGET_SPM: self._target.proto,
                 VOCAB_FILE: _json_bytes(self._source.vocabulary)}
        if self._separate:
            files[TARGET_VOCAB_FILE] = _json_bytes(self._target.vocabulary)
        files[IDS_FILE] = _json_bytes({side: {"size": ids.size, "eos_id": ids.eos_id, "unk_id": ids.unk_id,
                                              "pad_id": ids.pad_id, "bos_id": ids.bos_id}
                                       for side, ids in (("source", self._source.ids), ("target", self._target.ids))})
        files[CONFIG_FILE] = _json_bytes({"tokenizer_class": "MarianTokenizer", "separate_vocabs": self._separate,
                                          "eos_token": EOS_PIECE, "unk_token": UNK_PIECE, "pad_token": PAD_PIECE})
        return files

    def pair_encoder(self):
        """This tokenizer's `tokenize` / `tokenize_target` in plain Python
        (`keras_transformer.marian.pieces.PairEncoder`): what `data.prepare`
        encodes a training corpus with."""
        return PairEncoder(self._source.processor, self._source.piece_to_our_id, self._target.processor,
                           self._target.piece_to_our_id, self.files(),
                           max(self.vocabulary_size, self.source_vocabulary_size), self._language_piece)

    def with_target_language(self, language):
        """The same tokenizer putting `>>language<<` before every source (None: none)."""
        return MarianTokenizer(self._source.proto, self._target.proto, self._source.vocabulary,
                               self._target.vocabulary if self._separate else None, target_language=language,
                               source_ids=self._source.ids, target_ids=self._target.ids, name=self.name)

    # What the rest of the package reads.

    @property
    def vocabulary_size(self):
        """Our ids of the target side (the shared vocabulary when there is one)."""
        return self._target.ids.our_size

    @property
    def source_vocabulary_size(self):
        return self._source.ids.our_size

    @property
    def separate_vocabularies(self):
        return self._separate

    @property
    def target_language(self):
        """The language code put before every source (`>>deu<<`), or None."""
        return self._language_piece

    @property
    def language_codes(self):
        """The language codes of the source vocabulary (`>>deu<<`, ...)."""
        return sorted(p for p in self._source.vocabulary if p.startswith(">>") and p.endswith("<<"))

    @property
    def source_ids(self):
        """The `MarianIds` of the source vocabulary."""
        return self._source.ids

    @property
    def target_ids(self):
        """The `MarianIds` of the target vocabulary (the source's when shared)."""
        return self._target.ids

    @property
    def source_proto(self):
        return self._source.proto

    @property
    def target_proto(self):
        return self._target.proto

    def id_to_piece(self, token_id):
        """The target piece of our id (the shared vocabulary's when there is one)."""
        return self._target.our_pieces[int(token_id)]

    def source_id_to_piece(self, token_id):
        """The source piece of our id (differs from `id_to_piece` with separate vocabularies)."""
        return self._source.our_pieces[int(token_id)]

    def piece_to_id(self, piece):
        """Our id of a source piece (unk when it is not in the vocabulary)."""
        return self._source.piece_to_our_id.get(piece, UNK_ID)

    def vocabulary(self):
        """All target pieces, indexed by our id."""
        return list(self._target.our_pieces)

    def source_vocabulary(self):
        """All source pieces, indexed by our id."""
        return list(self._source.our_pieces)

    # In the graph.

    def tokenize(self, texts):
        """Source strings to our int32 ids, without EOS (with the language code
        first when `target_language` is set); shapes as `SubwordTokenizer.tokenize`."""
        return self._tokenize(texts, self._source, self._source_table, self._language_piece)

    def tokenize_target(self, texts):
        """Target strings to our int32 ids (target SentencePiece model and vocabulary), without EOS."""
        return self._tokenize(texts, self._target, self._target_table, None)

    def __call__(self, texts):
        return self.tokenize(texts)

    def _tokenize(self, texts, side, table, language_piece):
        try:
            texts = tf.convert_to_tensor(texts, dtype=tf.string)
        except (TypeError, ValueError) as error:
            raise _bad_texts_error(texts, error) from None
        rank = texts.shape.rank
        if rank not in (0, 1):
            raise ValueError(f"tokenize expects a scalar or 1-D string tensor, got shape {texts.shape}")
        batch = tf.reshape(texts, [-1])
        # Transformers splits the text around the special tokens written in it first.
        parts, _, _, part_splits = gen_regex_split_ops.regex_split_with_offsets(
            batch, self._special_pattern, self._special_pattern)
        special = tf.strings.regex_full_match(parts, self._special_pattern)
        coded = tf.strings.regex_full_match(parts, _CODE_PATTERN)
        code = tf.strings.regex_replace(parts, _CODE_PATTERN, r"\1")
        rest = tf.strings.regex_replace(parts, _CODE_PREFIX, "", replace_global=False)
        head = tf.where(special, parts, tf.where(coded, code, ""))
        rest = tf.where(special | ~coded, tf.where(special, "", parts), rest)
        pieces, piece_splits = _sentencepiece_ops.sentencepiece_tokenize_op(
            side.model_op.handle(), rest, nbest_size=0, alpha=1.0, add_bos=False, add_eos=False, reverse=False,
            out_type=tf.string, Tsplits=tf.int64)
        pieces = tf.RaggedTensor.from_row_splits(pieces, piece_splits, validate=False)
        heads = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(head, head != ""), tf.cast(head != "", tf.int64), validate=False)
        part_tokens = tf.concat([heads, pieces], axis=1)
        tokens = tf.RaggedTensor.from_row_splits(part_tokens, part_splits, validate=False).merge_dims(1, 2)
        if language_piece is not None:
            rows = tokens.nrows()
            codes = tf.RaggedTensor.from_row_lengths(
                tf.fill([rows], language_piece), tf.ones([rows], tf.int64), validate=False)
            tokens = tf.concat([codes, tokens], axis=1)
        ids = tf.ragged.map_flat_values(table.lookup, tokens)
        if rank == 0:
            return ids.flat_values
        return ids

    def detokenize(self, ids):
        """Our target ids back to strings, as `MarianTokenizer.decode(...,
        skip_special_tokens=True)`; each row ends at its first EOS and ids
        outside the vocabulary are ignored. Shapes and errors as
        `SubwordTokenizer.detokenize`."""
        kept, single = ids_to_keep(ids, self.vocabulary_size, drop=(PAD_ID, BOS_ID, UNK_ID))
        texts = tf.strings.reduce_join(tf.gather(self._surfaces, kept), axis=1)
        texts = tf.strings.regex_replace(texts, f"^{UNICODE_SPACE}+|{UNICODE_SPACE}+$", "")
        return texts[0] if single else texts

    def __repr__(self):
        return (f"MarianTokenizer(vocabulary_size={self.vocabulary_size}, "
                f"separate_vocabularies={self._separate}, target_language={self._language_piece!r})")


def _piece_table(side):
    keys = list(side.piece_to_our_id)
    values = np.array([side.piece_to_our_id[key] for key in keys], dtype=np.int32)
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(keys, tf.string), tf.constant(values, tf.int32)),
        default_value=UNK_ID)


def _json_bytes(data):
    return json.dumps(data, ensure_ascii=False, indent=2).encode("utf-8")
