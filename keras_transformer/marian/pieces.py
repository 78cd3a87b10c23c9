"""How a Marian model's text becomes pieces and pieces become text, in plain Python.

The rules of Transformers' `MarianTokenizer` (tests/tf/test_marian_tokenizer.py
checks them against it):

- text to pieces: the text is split around the special tokens written in it
  (`SPECIAL_PIECES`), which stay pieces of their own; a part that starts with
  a language code (`>>`, anything, up to the first `<<`) gives the code as a
  piece; the rest of each part is segmented by the side's SentencePiece model.
- pieces to text: each piece becomes its `surface` (special pieces nothing),
  the surfaces are joined and whitespace is stripped from both ends.

`keras_transformer.data.marian_tokenizer.MarianTokenizer` runs the same rules
in TensorFlow ops (and takes its surfaces from here); the CTranslate2 export's
client, which runs without TensorFlow, runs them here. Only `re` and a
`sentencepiece.SentencePieceProcessor`.
"""

import hashlib
import re

from keras_transformer.data.special_tokens import EOS_PIECE, PAD_PIECE, UNK_ID, UNK_PIECE

# The tokenizer's files, as Transformers' MarianTokenizer names them.
SOURCE_SPM = "source.spm"
TARGET_SPM = "target.spm"
VOCAB_FILE = "vocab.json"
TARGET_VOCAB_FILE = "target_vocab.json"  # with separate vocabularies

# Transformers' MarianTokenizer's special tokens (every OPUS-MT model's).
SPECIAL_PIECES = (EOS_PIECE, UNK_PIECE, PAD_PIECE)
# A capturing group: TF Text's regex split finds no delimiter without one,
# and Python's re.split keeps the delimiters with one.
SPECIAL_PATTERN = "(" + "|".join(re.escape(piece) for piece in sorted(SPECIAL_PIECES, key=len, reverse=True)) + ")"


def language_code(part):
    """(code, rest) of a part of a text: its leading `>>...<<` code, or ("", part)."""
    if part.startswith(">>"):
        end = part.find("<<")
        if end != -1:
            return part[: end + 2], part[end + 2 :]
    return "", part


def text_to_pieces(text, processor):
    """The pieces of `text` segmented by `processor` (the side's SentencePiece model)."""
    pieces = []
    for part in re.split(SPECIAL_PATTERN, text):
        if part in SPECIAL_PIECES:
            pieces.append(part)
            continue
        code, rest = language_code(part)
        if code:
            pieces.append(code)
        if rest:
            pieces.extend(processor.encode(rest, out_type=str))
    return pieces


def surface(piece, processor):
    """A piece's text in a decoded sentence (bytes), as SentencePiece's
    decoding of pieces gives it, with Transformers' `▁` -> space after it:
    control symbols of `processor` (the decoding model) give nothing, its
    unknown piece " ⁇ ", its byte pieces their byte, other pieces themselves."""
    piece_id = processor.piece_to_id(piece)
    known = not processor.is_unknown(piece_id) or processor.id_to_piece(piece_id) == piece
    if known and processor.is_control(piece_id):
        return b""
    if known and processor.is_unknown(piece_id):
        return " \u2047 ".encode("utf-8")
    if known and processor.is_byte(piece_id):
        return bytes([int(piece[3:-1], 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


# str.strip()'s whitespace, as an RE2 class (RE2's \s is ASCII only).
UNICODE_SPACE = (r"[\t\n\x{0b}\f\r \x{1c}-\x{1f}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}"
                 r"\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]")


def pieces_to_text(pieces, processor, skip=SPECIAL_PIECES):
    """The text of `pieces` (those in `skip` give nothing): Transformers'
    `decode(..., skip_special_tokens=True)`. Invalid UTF-8 from byte pieces
    becomes U+FFFD."""
    data = b"".join(surface(piece, processor) for piece in pieces if piece not in skip)
    return data.decode("utf-8", errors="replace").strip()


class PairEncoder:
    """Sources and targets to our ids by the rules above, as
    `MarianTokenizer.tokenize` / `tokenize_target` give them (without EOS):
    the encoder `keras_transformer.data.prepare` takes for an imported run's
    training corpus. Made by `MarianTokenizer.pair_encoder()`.

    Args:
        source_processor, target_processor: the sides' SentencePiece models.
        source_ids, target_ids: piece -> our id of each side (others: unk).
        files: {file name: bytes} of the tokenizer (kept with the prepared data).
        vocabulary_size: the larger side's our-id count.
        language_piece: a code (`>>deu<<`) put before every source, or None.
    """

    def __init__(self, source_processor, source_ids, target_processor, target_ids, files, vocabulary_size,
                 language_piece=None):
        self._sides = {"source": (source_processor, source_ids), "target": (target_processor, target_ids)}
        self._prefix = [source_ids[language_piece]] if language_piece is not None else []
        self.files = dict(files)
        self.vocabulary_size = int(vocabulary_size)
        digest = hashlib.sha256()
        for name in sorted(self.files):
            digest.update(name.encode() + b"\0" + hashlib.sha256(self.files[name]).digest())
        if language_piece is not None:
            digest.update(b"language\0" + language_piece.encode())
        self.sha256 = digest.hexdigest()

    def _encode(self, texts, side, prefix):
        processor, ids = self._sides[side]
        return [prefix + [ids.get(piece, UNK_ID) for piece in text_to_pieces(text, processor)] for text in texts]

    def encode_sources(self, texts):
        return self._encode(texts, "source", self._prefix)

    def encode_targets(self, texts):
        return self._encode(texts, "target", [])
