"""MarianTokenizer (ours, in the TF graph) against Transformers' MarianTokenizer on the same files."""

import json
import random
import warnings

import numpy as np
import pytest
import tensorflow as tf

from marian_folder import make_marian_folder, sentences, WORDS_DE, WORDS_EN

from keras_transformer.data.marian_tokenizer import MarianTokenizer, MarianVocabularyError
from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

transformers = pytest.importorskip("transformers")

TEXTS = [
    "The cat runs.", "", "   ", "  spaced   out  ", "Das Haus läuft schnell.", "Ünïcödé ✓ 漢字 😀",
    ">>deu<< The cat", ">>fra<<The dog", ">>xyz<< dog", " >>deu<< dog", ">>deu<<", ">><<x", ">>deu",
    "a</s>b <unk> c<pad>d", "</s>", "x</s></s>y", ">>deu<<</s>big", "tab\there\nnew line", "ß ö é",
    "<s> sees", "▁the ▁ cat", "ＦＵＬＬ　width", "the\u00a0dog\u2003!",
]


def _hf(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        return transformers.MarianTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module", params=["shared", "separate"])
def pair(request, tmp_path_factory):
    folder = make_marian_folder(tmp_path_factory.mktemp(request.param) / "model",
                                separate_vocabs=request.param == "separate")
    return MarianTokenizer.load(folder), _hf(folder), folder


def _ours_as_marian(ids, marian_ids):
    return [int(marian_ids.marian_of_ours[i]) for i in ids] + [marian_ids.eos_id]


def test_source_ids_equal_transformers(pair):
    ours, theirs, _ = pair
    texts = TEXTS + sentences(WORDS_EN, 20, seed=5)
    ids = ours.tokenize(texts).to_list()
    for text, row in zip(texts, ids):
        assert _ours_as_marian(row, ours.source_ids) == theirs(text)["input_ids"], text
    # A scalar gives the row's ids; tf.function gives the same.
    np.testing.assert_array_equal(ours.tokenize(TEXTS[0]), ids[0])
    traced = tf.function(ours.tokenize)(tf.constant(texts))
    assert traced.to_list() == ids


def test_target_ids_equal_transformers(pair):
    ours, theirs, _ = pair
    texts = TEXTS + sentences(WORDS_DE, 20, seed=6)
    if ours.separate_vocabularies:
        # Transformers gives a literal "<pad>" the source vocabulary's pad id
        # (its special tokens are source ids), a different piece of the target
        # vocabulary; ours gives the target pad.
        texts = [text for text in texts if "<pad>" not in text]
    ids = ours.tokenize_target(texts).to_list()
    for text, row in zip(texts, ids):
        assert _ours_as_marian(row, ours.target_ids) == theirs(text_target=text)["input_ids"], text


def test_detokenize_equals_transformers_decode(pair):
    ours, theirs, _ = pair
    rng = random.Random(0)
    rows = [[rng.randrange(ours.vocabulary_size) for _ in range(rng.randrange(12))] for _ in range(200)]
    rows = [[i for i in row if i != EOS_ID] for row in rows]
    rows += ours.tokenize_target(sentences(WORDS_DE, 10, seed=7) + TEXTS).to_list()
    texts = [t.decode("utf-8") for t in ours.detokenize(tf.ragged.constant(rows, tf.int32)).numpy()]
    for row, text in zip(rows, texts):
        # Ours ends at the first EOS (a literal "</s>" in a text gives one).
        row = row[: row.index(EOS_ID)] if EOS_ID in row else row
        marian = [int(ours.target_ids.marian_of_ours[i]) for i in row]
        target = ours.target_ids
        if set(marian) & (set(theirs.all_special_ids) ^ {target.eos_id, target.unk_id, target.pad_id}):
            # With separate vocabularies Transformers skips the source pad's
            # id, another target piece, and keeps the target pad (its special
            # ids are source ids); ours skips the target pad.
            continue
        assert text == theirs.decode(marian, skip_special_tokens=True), row
    # Each row ends at its first EOS; pad, BOS and ids outside the vocabulary give nothing.
    row = rows[-1][:4]
    expected = ours.detokenize(row).numpy()
    padded = [PAD_ID, BOS_ID, *row, -5, ours.vocabulary_size, 2**40, EOS_ID, *row]
    assert ours.detokenize(padded).numpy() == expected
    dense = ours.detokenize(np.array([padded, padded], dtype=np.int64)).numpy()
    assert list(dense) == [expected, expected]


def test_target_language(pair):
    ours, theirs, _ = pair
    tagged = ours.with_target_language("deu")
    assert tagged.target_language == ">>deu<<" and ours.target_language is None
    assert ours.with_target_language(">>fra<<").target_language == ">>fra<<"
    for text in ("The cat runs.", "", "a</s>b"):
        expected = theirs(">>deu<< " + text)["input_ids"]
        assert _ours_as_marian(tagged.tokenize(text).numpy(), ours.source_ids) == expected, text
    # Targets never get the code.
    assert tagged.tokenize_target(["Das Haus"]).to_list() == ours.tokenize_target(["Das Haus"]).to_list()
    with pytest.raises(ValueError, match=r"'spa': >>spa<< is not in the vocabulary; the model's codes: "
                                          r">>deu<<, >>fra<<"):
        ours.with_target_language("spa")


def test_special_ids_and_pieces(pair):
    ours, theirs, _ = pair
    assert (ours.pad_id, ours.unk_id, ours.bos_id, ours.eos_id) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    # Marian's vocabulary plus our BOS.
    assert ours.vocabulary_size == len(theirs.decoder) + 1
    pieces = ours.vocabulary()
    assert (pieces[PAD_ID], pieces[UNK_ID], pieces[EOS_ID]) == ("<pad>", "<unk>", "</s>")
    assert len(set(pieces)) == len(pieces)
    assert ours.id_to_piece(EOS_ID) == "</s>"
    assert ours.piece_to_id(">>deu<<") == int(ours.source_ids.ours_of_marian[theirs.encoder[">>deu<<"]])
    assert ours.piece_to_id("no such piece") == UNK_ID


def test_save_load_round_trip(pair, tmp_path):
    ours, _, _ = pair
    ours.save(tmp_path / "copy")
    again = MarianTokenizer.load(tmp_path / "copy")
    assert again.separate_vocabularies == ours.separate_vocabularies
    texts = TEXTS + sentences(WORDS_EN, 5, seed=8)
    assert again.tokenize(texts).to_list() == ours.tokenize(texts).to_list()
    # Transformers reads what we write.
    theirs = _hf(tmp_path / "copy")
    assert _ours_as_marian(again.tokenize("The cat").numpy(), again.source_ids) == theirs("The cat")["input_ids"]


def test_saved_model_without_keras(pair, tmp_path):
    """The tables and SentencePiece models travel in a SavedModel (tracked)."""
    ours, _, _ = pair
    module = tf.Module()
    module.tokenizer = ours.with_target_language("deu")
    module.encode = tf.function(lambda texts: module.tokenizer.tokenize(texts).to_tensor(-1),
                                input_signature=[tf.TensorSpec([None], tf.string)])
    module.decode = tf.function(lambda ids: module.tokenizer.detokenize(ids),
                                input_signature=[tf.TensorSpec([None, None], tf.int32)])
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    texts = ["The cat runs.", "a</s>b", ""]
    expected = module.tokenizer.tokenize(texts).to_tensor(-1).numpy()
    np.testing.assert_array_equal(loaded.encode(tf.constant(texts)).numpy(), expected)
    ids = ours.tokenize_target(["Das Haus läuft."]).to_tensor()
    assert loaded.decode(ids).numpy()[0] == ours.detokenize(ids).numpy()[0] == "Das Haus läuft.".encode()


def test_bad_files_name_the_file(tmp_path):
    folder = make_marian_folder(tmp_path / "model")
    good = json.loads((folder / "vocab.json").read_text())
    (folder / "source.spm").rename(folder / "moved.spm")
    with pytest.raises(FileNotFoundError, match=r"source\.spm: no such file"):
        MarianTokenizer.load(folder)
    (folder / "moved.spm").rename(folder / "source.spm")
    (folder / "vocab.json").write_text("{not json")
    with pytest.raises(MarianVocabularyError, match=r"vocab\.json: not a JSON vocabulary"):
        MarianTokenizer.load(folder)
    del good["<pad>"]
    (folder / "vocab.json").write_text(json.dumps(good))
    with pytest.raises(MarianVocabularyError, match=r"vocab\.json: no <pad> piece"):
        MarianTokenizer.load(folder)
    (folder / "target.spm").write_bytes(b"not a model")
    with pytest.raises(MarianVocabularyError, match=r"target\.spm: not a SentencePiece model"):
        MarianTokenizer.load(folder)
