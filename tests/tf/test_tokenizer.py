import io

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_transformer.data.tokenizer import SubwordTokenizer

WORDS_EN = "the a house cat dog sees small big red green runs walks quickly today old new".split()
WORDS_DE = "das ein Haus Katze Hund sieht klein groß rot grün läuft geht schnell heute alt neu".split()


def make_pairs(count=400, seed=0):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        length = int(rng.integers(2, 9))
        indices = rng.integers(0, len(WORDS_EN), size=length)
        source = " ".join(WORDS_EN[i] for i in indices).capitalize() + "."
        target = " ".join(WORDS_DE[i] for i in indices).capitalize() + "."
        pairs.append((source, target))
    return pairs


@pytest.fixture(scope="module")
def pairs():
    return make_pairs()


@pytest.fixture(scope="module")
def tokenizer(pairs):
    return SubwordTokenizer.train(pairs, 200, model_type="bpe", seed=1)


TEXTS = [
    "The small cat sees a dog.",
    "Das kleine Haus ist grün und alt.",
    "Heute läuft der große Hund schnell.",
]


def test_special_ids_are_fixed(tokenizer):
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    assert tokenizer.vocabulary()[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tokenizer.vocabulary_size == 200
    # The model proto agrees: an independent reader sees the same ids.
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    assert (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id()) == (0, 1, 2, 3)
    assert processor.get_piece_size() == 200


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_round_trip(pairs, model_type):
    tokenizer = SubwordTokenizer.train(pairs, 100, model_type=model_type, seed=1)
    assert tokenizer.model_type == model_type
    ids = tokenizer.tokenize(TEXTS)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    flat = ids.flat_values.numpy()
    assert not np.isin(flat, [0, 2, 3]).any()
    decoded = [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
    assert decoded == TEXTS


def test_joint_vocabulary_covers_both_sides(tokenizer):
    # Words seen only in the target language still tokenize without unk.
    for text in ["Katze Hund grün läuft", "cat dog green runs"]:
        ids = tokenizer.tokenize(text).numpy()
        assert tokenizer.unk_id not in ids


def test_matches_sentencepiece_reference(tokenizer):
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    ids = tokenizer.tokenize(TEXTS)
    assert ids.to_list() == processor.encode(TEXTS)


def test_scalar_input_gives_vector(tokenizer):
    ids = tokenizer.tokenize(TEXTS[0])
    assert ids.shape.rank == 1
    assert tokenizer.detokenize(ids).numpy().decode() == TEXTS[0]


def test_detokenize_strips_specials_and_stops_at_eos(tokenizer):
    first = tokenizer.tokenize(TEXTS[0]).numpy().tolist()
    second = tokenizer.tokenize(TEXTS[1]).numpy().tolist()
    width = len(first) + len(second) + 6
    rows = [
        [2] + first + [3] + second + [0] * 4,  # text after eos is ignored
        [2] + second + [0] * (width - len(second) - 1),  # no eos: all of it
        [3] + first + [0] * (width - len(first) - 1),  # eos first: empty
        [0, 2, 0] + first + [3] + [0] * (width - len(first) - 4),  # pad/bos anywhere
    ]
    assert all(len(row) == width for row in rows)
    decoded = tokenizer.detokenize(np.array(rows, dtype=np.int64)).numpy()
    assert [s.decode() for s in decoded] == [TEXTS[0], TEXTS[1], "", TEXTS[0]]
    ragged = tf.ragged.constant([[2] + first + [3, 5, 6], second])
    assert [s.decode() for s in tokenizer.detokenize(ragged).numpy()] == [TEXTS[0], TEXTS[1]]
    # Ids outside the vocabulary (e.g. a model with a bigger output) are ignored.
    assert tokenizer.detokenize([9999] + first + [-5]).numpy().decode() == TEXTS[0]


def test_survives_set_random_seed(pairs):
    # tf.random.set_seed clears the eager kernel cache, which destroys the
    # model resource of a plain tensorflow_text.SentencepieceTokenizer
    # (tensorflow/text#570); training scripts seed after building data too.
    tokenizer = SubwordTokenizer.train(pairs, 100, seed=1)
    compiled = tf.function(lambda texts: tokenizer.tokenize(texts).to_tensor())
    dataset = tf.data.Dataset.from_tensor_slices(TEXTS).map(tokenizer.tokenize)
    before = tokenizer.tokenize(TEXTS).to_list()
    before_compiled = compiled(tf.constant(TEXTS)).numpy()
    tf.random.set_seed(7)
    import keras

    keras.utils.set_random_seed(8)
    assert tokenizer.tokenize(TEXTS).to_list() == before
    np.testing.assert_array_equal(compiled(tf.constant(TEXTS)).numpy(), before_compiled)
    assert [ids.numpy().tolist() for ids in dataset] == before
    assert [s.decode() for s in tokenizer.detokenize(tokenizer.tokenize(TEXTS)).numpy()] == TEXTS


def test_runs_inside_tf_function(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(texts):
        ids = tokenizer.tokenize(texts)
        padded = ids.to_tensor(default_value=tokenizer.pad_id)
        return tokenizer.detokenize(padded), ids.row_lengths()

    decoded, lengths = round_trip(tf.constant(TEXTS))
    assert [s.decode() for s in decoded.numpy()] == TEXTS
    assert lengths.numpy().tolist() == [len(x) for x in tokenizer.tokenize(TEXTS).to_list()]


def test_robust_to_empty_strings_and_odd_unicode(tokenizer):
    odd = ["", " ", "\u200b", "😀🙂", "\x00nul", "日本語のテキスト", "e\u0301", "\ufeffbom"]
    ids = tokenizer.tokenize(odd)
    assert ids.nrows() == len(odd)
    assert ids[0].numpy().tolist() == []
    assert ids[1].numpy().tolist() == []
    decoded = tokenizer.detokenize(ids)
    assert decoded.shape == (len(odd),)
    invalid = tokenizer.tokenize(tf.constant([b"\xff\xfe broken"]))
    assert invalid.nrows() == 1


def test_save_load_round_trip(tokenizer, tmp_path):
    path = tokenizer.save(tmp_path / "sub" / "spm.model")
    assert (tmp_path / "sub" / "spm.model").read_bytes() == tokenizer.proto
    loaded = SubwordTokenizer.load(path)
    assert loaded.proto == tokenizer.proto
    assert loaded.vocabulary() == tokenizer.vocabulary()
    assert loaded.tokenize(TEXTS).to_list() == tokenizer.tokenize(TEXTS).to_list()
    # The proto bytes alone rebuild the same tokenizer (for bundles).
    assert SubwordTokenizer(tokenizer.proto).tokenize(TEXTS[2]).numpy().tolist() == (
        tokenizer.tokenize(TEXTS[2]).numpy().tolist()
    )


def test_load_errors_name_the_file(tmp_path, pairs):
    with pytest.raises(FileNotFoundError, match="missing.model"):
        SubwordTokenizer.load(tmp_path / "missing.model")
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="garbage.model"):
        SubwordTokenizer.load(garbage)
    # A SentencePiece model with its own default ids (unk 0, bos 1, eos 2).
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([s for pair in pairs for s in pair]),
        model_writer=model,
        vocab_size=100,
        minloglevel=2,
    )
    other = tmp_path / "other.model"
    other.write_bytes(model.getvalue())
    with pytest.raises(ValueError, match="other.model.*special ids"):
        SubwordTokenizer.load(other)


def test_train_argument_errors(pairs):
    with pytest.raises(ValueError, match="model_type"):
        SubwordTokenizer.train(pairs, 100, model_type="wordpiece")
    with pytest.raises(ValueError, match="vocabulary_size"):
        SubwordTokenizer.train(pairs, 4)
    with pytest.raises(ValueError, match="no non-empty sentence"):
        SubwordTokenizer.train(["", ("", " ")], 100)
    with pytest.raises(TypeError, match=r"texts_or_pairs\[1\]"):
        SubwordTokenizer.train(["ok", 5], 100)
    with pytest.raises(ValueError, match="hard_vocab_limit"):
        SubwordTokenizer.train(pairs[:20], 5000)


def test_soft_vocabulary_limit_on_tiny_corpus(pairs):
    tokenizer = SubwordTokenizer.train(pairs[:20], 5000, hard_vocab_limit=False)
    assert 4 < tokenizer.vocabulary_size < 5000
    assert tokenizer.vocabulary()[:4] == ["<pad>", "<unk>", "<s>", "</s>"]


def test_saved_model_tracks_the_tokenizer(tokenizer, tmp_path):
    module = tf.Module()
    module.tokenizer = tokenizer
    module.tokenize = tf.function(
        lambda texts: tokenizer.tokenize(texts).to_tensor(),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    expected = tokenizer.tokenize(TEXTS).to_tensor().numpy()
    np.testing.assert_array_equal(restored.tokenize(tf.constant(TEXTS)).numpy(), expected)


def test_keras_export_archive_accepts_it(tokenizer):
    import keras

    archive = keras.export.ExportArchive()
    archive.track(tokenizer)  # raises for untrackable objects


def test_user_defined_symbols_stay_one_piece(pairs):
    """A back-translation tag: one piece of its own, here and in SentencePiece's own encoder,
    where a plain vocabulary spells it with unknown pieces."""
    plain = SubwordTokenizer.train(pairs, 100, model_type="unigram", seed=1)
    assert plain.unk_id in plain.tokenize(["<BT> The cat"]).to_list()[0]
    tagged = SubwordTokenizer.train(pairs, 100, model_type="unigram", seed=1, user_defined_symbols=["<BT>", "<2de>"])
    assert tagged.vocabulary_size == 100
    tag = tagged.piece_to_id("<BT>")
    assert tag == 4 and tagged.piece_to_id("<2de>") == 5  # right after the special ids
    texts = ["<BT> The cat sees a dog.", "The<BT>dog"]
    ids = tagged.tokenize(texts).to_list()
    assert [tagged.id_to_piece(i) for i in ids[0][:2]] == ["▁", "<BT>"] and tagged.unk_id not in ids[0]
    assert ids[1].count(tag) == 1
    processor = sentencepiece.SentencePieceProcessor(model_proto=tagged.proto)
    assert processor.encode(texts) == ids
    assert [t.decode() for t in tagged.detokenize(ids).numpy()] == texts


@pytest.mark.parametrize("symbols, words", [
    ("<BT>", "list of strings"), (["<BT>", ""], "not a non-empty string"), (["<B T>"], "whitespace"),
    (["</s>"], "special piece"), (["<BT>", "<BT>"], "twice"),
])
def test_user_defined_symbols_errors(pairs, symbols, words):
    with pytest.raises((TypeError, ValueError), match=f"user_defined_symbols.*{words}|{words}"):
        SubwordTokenizer.train(pairs, 100, user_defined_symbols=symbols)
