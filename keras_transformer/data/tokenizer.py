"""A joint source/target SentencePiece vocabulary that runs in the TF graph.

Training uses the `sentencepiece` package; tokenization uses TensorFlow
Text's SentencePiece ops with the serialized model proto, so it runs inside
`tf.data`, `tf.function` and SavedModels (TF Serving links these ops). The
special ids are fixed for every model: pad = 0, unk = 1, bos = 2, eos = 3.

Why not `tensorflow_text.SentencepieceTokenizer` as is: it creates its model
resource once, eagerly, and that resource is owned by an eager kernel, so
`tf.random.set_seed` / `keras.utils.set_random_seed` (which clear the eager
kernel cache) destroy it and every later call fails with "Resource
..._SentencepieceOp... does not exist" (tensorflow/text#570). Here the model
op is created where it is used, in each graph (or eagerly, from the kernel
cache), so nothing outlives its kernel, and an export has no captured
resource to track: the model travels in the graph.
"""

import hashlib
import io
import os

import numpy as np
import sentencepiece
import tensorflow as tf
from tensorflow_text.python.ops import sentencepiece_tokenizer as _tf_text_sentencepiece
from keras_transformer.data.corpus import unpaired_surrogate

_sentencepiece_ops = _tf_text_sentencepiece.gen_sentencepiece_tokenizer

from keras_transformer.data.special_tokens import (  # noqa: F401  (re-exported)
    BOS_ID, BOS_PIECE, EOS_ID, EOS_PIECE, PAD_ID, PAD_PIECE, UNK_ID, UNK_PIECE,
)

_MODEL_TYPES = ("bpe", "unigram")


def _iter_training_sentences(texts_or_pairs):
    """Flattens strings and (source, target) pairs into non-empty sentences."""
    for index, item in enumerate(texts_or_pairs):
        if isinstance(item, bytes):
            item = item.decode("utf-8")
        if isinstance(item, str):
            sentences = (item,)
        elif isinstance(item, (tuple, list)):
            sentences = item
        else:
            raise TypeError(
                f"texts_or_pairs[{index}] must be a string or a tuple of "
                f"strings, got {type(item).__name__}"
            )
        for sentence in sentences:
            if isinstance(sentence, bytes):
                sentence = sentence.decode("utf-8")
            if not isinstance(sentence, str):
                raise TypeError(
                    f"texts_or_pairs[{index}] contains a "
                    f"{type(sentence).__name__}, not a string"
                )
            # SentencePiece reads sentences one per line.
            sentence = " ".join(sentence.split())
            if sentence:
                yield sentence


_SPECIAL_PIECES = (PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE)


def _check_user_defined_symbols(symbols):
    """A list of distinct, non-empty, whitespace-free strings other than the special pieces."""
    if isinstance(symbols, (str, bytes)):
        raise TypeError(f"user_defined_symbols must be a list of strings, got the string {symbols!r}")
    symbols = list(symbols)
    for symbol in symbols:
        if not isinstance(symbol, str) or not symbol:
            raise ValueError(f"user_defined_symbols: {symbol!r} is not a non-empty string")
        if symbol != "".join(symbol.split()):
            # SentencePiece splits text on whitespace first: such a symbol never matches.
            raise ValueError(f"user_defined_symbols: {symbol!r} contains whitespace")
        if symbol in _SPECIAL_PIECES:
            raise ValueError(f"user_defined_symbols: {symbol!r} is a special piece already")
    if len(set(symbols)) != len(symbols):
        raise ValueError(f"user_defined_symbols: {symbols!r} holds a symbol twice")
    return symbols


class SentencePieceModelOp:
    """The SentencePiece model op of one proto: a new op in each graph being
    built (it looks up, or loads once, the model under a name derived from its
    content), one kept eagerly. See the module docstring for why no resource is
    created once and captured."""

    def __init__(self, proto, name_prefix):
        self.proto = proto
        self.shared_name = name_prefix + hashlib.sha256(proto).hexdigest()[:32]
        self._eager_handle = None

    def handle(self):
        if tf.executing_eagerly():
            # Creating the op eagerly costs milliseconds (the proto is an
            # attribute); the shared resource outlives the kernel, so the
            # handle stays valid across kernel-cache clears.
            if self._eager_handle is None:
                self._eager_handle = self._new_op()
            return self._eager_handle
        return self._new_op()

    def _new_op(self):
        return _sentencepiece_ops.sentencepiece_op(model=self.proto, shared_name=self.shared_name)


class SubwordTokenizer(tf.Module):
    """SentencePiece subword tokenizer with fixed special ids.

    Build one with `SubwordTokenizer.train(...)`, `SubwordTokenizer.load(path)`
    or `SubwordTokenizer(proto_bytes)`.

    Args:
        proto: the serialized SentencePiece `ModelProto` (bytes). Its special
            ids must be pad 0, unk 1, bos 2, eos 3.
        name: the `tf.Module` name.
    """

    pad_id = PAD_ID
    unk_id = UNK_ID
    bos_id = BOS_ID
    eos_id = EOS_ID

    def __init__(self, proto, name="subword_tokenizer"):
        super().__init__(name=name)
        if isinstance(proto, str):
            raise TypeError(
                "proto must be the serialized model as bytes; to read a "
                ".model file use SubwordTokenizer.load(path)"
            )
        proto = bytes(proto)
        processor = self._check_proto(proto)
        self._proto = proto
        # A plain Python object: not tracked, not saved (the proto is).
        self._processor = processor
        self._vocabulary_size = processor.get_piece_size()
        self._model_type = _model_type_name(processor)
        self._model_op = SentencePieceModelOp(proto, "keras_transformer_sentencepiece_")

    @staticmethod
    def _check_proto(proto, origin="proto"):
        try:
            processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        except Exception as error:  # sentencepiece raises bare RuntimeError
            raise ValueError(
                f"{origin}: not a valid SentencePiece model ({error})"
            ) from None
        found = {
            "pad": processor.pad_id(),
            "unk": processor.unk_id(),
            "bos": processor.bos_id(),
            "eos": processor.eos_id(),
        }
        expected = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
        if found != expected:
            raise ValueError(
                f"{origin}: special ids must be {expected}, the model has "
                f"{found}; train it with SubwordTokenizer.train"
            )
        return processor

    @classmethod
    def train(
        cls,
        texts_or_pairs,
        vocabulary_size,
        *,
        model_type="bpe",
        character_coverage=1.0,
        input_sentence_size=2_000_000,
        byte_fallback=False,
        hard_vocab_limit=True,
        normalization_rule_name="nmt_nfkc",
        max_sentence_length=4192,
        seed=None,
        num_threads=None,
        user_defined_symbols=(),
        name="subword_tokenizer",
    ):
        """Trains a joint vocabulary on source and target sentences.

        Args:
            texts_or_pairs: iterable of strings or of `(source, target)` pairs
                (a `ParallelCorpus` works); both sides go into one vocabulary.
                Empty strings are ignored.
            vocabulary_size: number of pieces, the 4 special ones included.
            model_type: `"bpe"` or `"unigram"`.
            character_coverage: share of characters covered by the
                vocabulary; rarer characters become unk (or bytes with
                `byte_fallback`).
            input_sentence_size: at most this many sentences (sampled at
                random) are used for training, which keeps training fast.
            byte_fallback: spell unknown characters as UTF-8 byte pieces
                instead of unk (adds 256 pieces to the vocabulary).
            hard_vocab_limit: if False, `vocabulary_size` is an upper bound
                (useful for tiny corpora).
            normalization_rule_name: SentencePiece normalization
                (`"nmt_nfkc"`, `"nfkc"`, `"identity"`, ...).
            max_sentence_length: longer sentences (in bytes) are ignored in
                training.
            seed: seed of SentencePiece's sentence sampling.
            num_threads: training threads (default: CPU count, at most 16).
            user_defined_symbols: strings that always become one piece of
                their own wherever they occur in a text, e.g. the tag that
                marks back-translated sources (`<BT>`). They take the ids
                right after the 4 special ones, count towards
                `vocabulary_size`, and detokenize to themselves.
        """
        if model_type not in _MODEL_TYPES:
            raise ValueError(
                f"model_type must be one of {_MODEL_TYPES}, got {model_type!r}"
            )
        if (
            isinstance(vocabulary_size, bool)
            or not isinstance(vocabulary_size, int)
            or vocabulary_size <= 4
        ):
            raise ValueError(
                f"vocabulary_size must be an int > 4 (4 ids are special), "
                f"got {vocabulary_size!r}"
            )
        user_defined_symbols = _check_user_defined_symbols(user_defined_symbols)
        sentences = list(_iter_training_sentences(texts_or_pairs))
        if not sentences:
            raise ValueError("texts_or_pairs holds no non-empty sentence")
        if num_threads is None:
            num_threads = max(1, min(16, os.cpu_count() or 1))
        if seed is not None:
            sentencepiece.set_random_generator_seed(int(seed))
        model = io.BytesIO()
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=model,
                vocab_size=vocabulary_size,
                model_type=model_type,
                character_coverage=character_coverage,
                input_sentence_size=input_sentence_size,
                shuffle_input_sentence=True,
                byte_fallback=byte_fallback,
                hard_vocab_limit=hard_vocab_limit,
                normalization_rule_name=normalization_rule_name,
                max_sentence_length=max_sentence_length,
                num_threads=num_threads,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                pad_piece=PAD_PIECE,
                unk_piece=UNK_PIECE,
                bos_piece=BOS_PIECE,
                eos_piece=EOS_PIECE,
                user_defined_symbols=user_defined_symbols,
                minloglevel=2,
            )
        except RuntimeError as error:
            raise ValueError(
                f"SentencePiece training failed ({error}); with a small corpus "
                f"lower vocabulary_size or pass hard_vocab_limit=False"
            ) from None
        return cls(model.getvalue(), name=name)

    @classmethod
    def load(cls, path, name="subword_tokenizer"):
        """Reads a SentencePiece `.model` file written by `save`."""
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"tokenizer model not found: {path}")
        with open(path, "rb") as stream:
            proto = stream.read()
        cls._check_proto(proto, origin=path)
        return cls(proto, name=name)

    def save(self, path):
        """Writes the SentencePiece model proto (a `.model` file)."""
        path = os.fspath(path)
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        with open(path, "wb") as stream:
            stream.write(self._proto)
        return path

    @property
    def proto(self):
        """The serialized SentencePiece model (bytes), e.g. to embed it."""
        return self._proto

    @property
    def vocabulary_size(self):
        return self._vocabulary_size

    @property
    def model_type(self):
        return self._model_type

    def id_to_piece(self, token_id):
        return self._processor.id_to_piece(int(token_id))

    def piece_to_id(self, piece):
        return self._processor.piece_to_id(piece)

    def vocabulary(self):
        """All pieces, indexed by id."""
        return [
            self._processor.id_to_piece(i)
            for i in range(self._vocabulary_size)
        ]

    def tokenize(self, texts):
        """Strings to int32 ids, without bos/eos.

        A scalar string gives a 1-D int32 tensor; a 1-D batch gives a
        `tf.RaggedTensor` of shape `(batch, None)`. Runs in graph mode.
        Bytes need not be valid UTF-8 (SentencePiece reads invalid bytes as
        unknown); a Python `str` with an unpaired surrogate, or an item that
        is not a string, raises an error naming `texts[i]`.
        """
        try:
            texts = tf.convert_to_tensor(texts, dtype=tf.string)
        except (TypeError, ValueError) as error:
            raise _bad_texts_error(texts, error) from None
        rank = texts.shape.rank
        if rank not in (0, 1):
            raise ValueError(
                f"tokenize expects a scalar or 1-D string tensor, got shape "
                f"{texts.shape}"
            )
        values, row_splits = _sentencepiece_ops.sentencepiece_tokenize_op(
            self._model_op.handle(),
            tf.reshape(texts, [-1]) if rank == 0 else texts,
            nbest_size=0,
            alpha=1.0,
            add_bos=False,
            add_eos=False,
            reverse=False,
            out_type=tf.int32,
            Tsplits=tf.int64,
        )
        if rank == 0:
            # One row: its ids are all the values (ragged indexing is slow).
            return values
        return tf.RaggedTensor.from_row_splits(values, row_splits, validate=False)

    def detokenize(self, ids):
        """Ids back to strings.

        Accepts a 1-D or 2-D int tensor (dense, e.g. padded decoder output,
        or ragged) or nested lists of ints. Each row is cut at its first eos;
        pad and bos are removed and ids outside the vocabulary (negative or
        too large, int64 included) are ignored. Returns a scalar string for
        1-D input, a 1-D string tensor for 2-D input; the strings are valid
        UTF-8 (SentencePiece writes U+FFFD for byte pieces that form no
        character). Ids that are not integers (or Python ints beyond int64)
        raise `TypeError`.
        """
        ids, single = ids_to_keep(ids, self._vocabulary_size, drop=(PAD_ID, BOS_ID))
        texts = _sentencepiece_ops.sentencepiece_detokenize_op(
            self._model_op.handle(),
            ids.flat_values,
            ids.row_splits,
            add_bos=False,
            add_eos=False,
            reverse=False,
        )
        return texts[0] if single else texts

    def tokenize_target(self, texts):
        """Target strings to ids: `tokenize` (one vocabulary serves both sides)."""
        return self.tokenize(texts)

    def __call__(self, texts):
        return self.tokenize(texts)

    def __repr__(self):
        return (
            f"SubwordTokenizer(model_type={self._model_type!r}, "
            f"vocabulary_size={self._vocabulary_size})"
        )


def ids_to_keep(ids, vocabulary_size, drop):
    """The ids a detokenizer turns into text: each row up to its first eos,
    without the ids in `drop` and those outside [0, vocabulary_size).

    `ids`: a 1-D or 2-D int tensor (dense or ragged) or nested lists of ints.
    Returns (a 2-D int32 `tf.RaggedTensor`, whether `ids` was 1-D).
    """
    if isinstance(ids, (list, tuple)):
        try:
            ids = tf.ragged.constant(ids, dtype=tf.int64)
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"detokenize: ids must be integers in the int64 range "
                f"(nested lists of ints or an int tensor): {error}"
            ) from None
    elif not isinstance(ids, tf.RaggedTensor):
        try:
            ids = tf.convert_to_tensor(ids)
        except (TypeError, ValueError) as error:
            raise TypeError(f"detokenize: ids must be integers: {error}") from None
    if not ids.dtype.is_integer:
        raise TypeError(f"detokenize: ids must be integers, got {ids.dtype.name}")
    # Range checks in int64: a cast to int32 first would wrap 2**32 + 5
    # around to the valid id 5.
    ids = tf.cast(ids, tf.int64)
    single = ids.shape.rank == 1
    if single:
        ids = ids[tf.newaxis]
    if ids.shape.rank != 2:
        raise ValueError(
            f"detokenize expects 1-D or 2-D ids, got shape {ids.shape}"
        )
    if isinstance(ids, tf.RaggedTensor):
        # Padding with pad is harmless: pad is removed below.
        ids = ids.to_tensor(default_value=PAD_ID)
    before_eos = (
        tf.math.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1)
        == 0
    )
    keep = before_eos & (ids >= 0) & (ids < vocabulary_size)
    for dropped in drop:
        keep &= tf.not_equal(ids, dropped)
    return tf.cast(tf.ragged.boolean_mask(ids, keep), tf.int32), single


def _bad_texts_error(texts, error):
    """The error for `texts` that cannot become a string tensor, naming the item."""
    if isinstance(texts, (str, bytes)):
        items = [("texts", texts)]
    elif isinstance(texts, (list, tuple, np.ndarray)):
        flat = np.asarray(texts, dtype=object).reshape(-1) if isinstance(texts, np.ndarray) else texts
        items = [(f"texts[{index}]", item) for index, item in enumerate(flat)]
    else:
        items = []
    for label, item in items:
        if isinstance(item, str):
            problem = unpaired_surrogate(item)
            if problem:
                return ValueError(f"tokenize: {label} is not valid Unicode: {problem}")
        elif not isinstance(item, bytes):
            return TypeError(f"tokenize: {label} is {type(item).__name__}, not a string")
    return TypeError(
        f"tokenize expects strings (str, bytes, a list of them or a string tensor), "
        f"got {type(texts).__name__}: {error}"
    )


def _model_type_name(processor):
    # The Python API does not expose the trainer spec directly; the proto does.
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(processor.serialized_model_proto())
    return sentencepiece_model_pb2.TrainerSpec.ModelType.Name(
        model.trainer_spec.model_type
    ).lower()
