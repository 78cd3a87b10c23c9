import collections
import json

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import PipelineStats
from keras_transformer.data import SubwordTokenizer
from keras_transformer.data import default_bucket_boundaries
from keras_transformer.data import make_dataset
from keras_transformer.data import make_id_dataset
from keras_transformer.data import read_jsonl

BOS, EOS, PAD = 2, 3, 0


def random_id_pairs(count, max_length, seed=0, vocabulary_size=50):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        source = rng.integers(4, vocabulary_size, size=int(rng.integers(1, max_length + 1)))
        target = rng.integers(4, vocabulary_size, size=int(rng.integers(1, max_length + 1)))
        pairs.append((source.tolist(), target.tolist()))
    return pairs


def strip_row(row, leading=None, trailing=None):
    """A padded row without padding, checking the expected special tokens."""
    row = [int(token) for token in row]
    while row and row[-1] == PAD:
        row.pop()
    if leading is not None:
        assert row[0] == leading
        row = row[1:]
    if trailing is not None:
        assert row[-1] == trailing
        row = row[:-1]
    assert PAD not in row and BOS not in row and EOS not in row
    return row


def collect_pairs(dataset):
    """Multiset of (source, target) id tuples, checking BOS/EOS placement."""
    pairs = collections.Counter()
    for inputs, labels in dataset:
        source, target_in, labels = (
            inputs["source"].numpy(),
            inputs["target"].numpy(),
            labels.numpy(),
        )
        for s, t, y in zip(source, target_in, labels):
            src = strip_row(s, trailing=EOS)
            tgt_in = strip_row(t, leading=BOS)
            tgt = strip_row(y, trailing=EOS)
            assert tgt_in == tgt  # decoder input is labels shifted right
            pairs[(tuple(src), tuple(tgt))] += 1
    return pairs


def batches_as_arrays(dataset):
    return [
        (inputs["source"].numpy(), inputs["target"].numpy(), labels.numpy())
        for inputs, labels in dataset
    ]


def test_default_bucket_boundaries():
    boundaries = default_bucket_boundaries(256)
    assert boundaries[0] == 8 and boundaries[-1] == 256
    assert all(b % 8 == 0 for b in boundaries)
    assert all(b2 > b1 for b1, b2 in zip(boundaries, boundaries[1:]))
    # Growth is geometric: ratios stay near 1.2 once past the first steps.
    ratios = [b2 / b1 for b1, b2 in zip(boundaries[5:], boundaries[6:])]
    assert all(1.1 <= r <= 1.35 for r in ratios)
    assert default_bucket_boundaries(100)[-1] == 104
    assert default_bucket_boundaries(5) == [8]
    assert default_bucket_boundaries(30, min_boundary=4, growth=1, multiple=4) == [4, 8, 12, 16, 20, 24, 28, 32]
    with pytest.raises(ValueError, match="growth"):
        default_bucket_boundaries(30, growth=0.9)


def test_batches_respect_token_budget_and_bucket_shapes():
    pairs = random_id_pairs(600, 60, seed=1) + random_id_pairs(300, 6, seed=9)
    tokens_per_batch = 256
    boundaries = [8, 16, 32, 64]
    dataset = make_id_dataset(
        pairs,
        tokens_per_batch=tokens_per_batch,
        max_length=64,
        bucket_boundaries=boundaries,
        seed=0,
    )
    batches_per_bucket = collections.Counter()
    for source, target_in, labels in batches_as_arrays(dataset):
        batch, length = source.shape
        assert source.dtype == target_in.dtype == labels.dtype == np.int32
        assert target_in.shape == labels.shape == (batch, length)
        assert length in boundaries
        assert batch * length <= tokens_per_batch
        # Each row belongs in this bucket: its length is above the previous
        # boundary and at most this one.
        lengths = np.maximum((source != PAD).sum(1), (labels != PAD).sum(1))
        assert lengths.max() <= length
        index = boundaries.index(length)
        if index:
            assert lengths.min() > boundaries[index - 1]
        batches_per_bucket[length] += 1
    # Full batches use the whole budget (batch size = budget // boundary): a
    # bucket of n pairs gives ceil(n / batch size) batches.
    pair_lengths = [max(len(s), len(t)) + 1 for s, t in pairs]
    for index, boundary in enumerate(boundaries):
        low = boundaries[index - 1] if index else 0
        count = sum(low < n <= boundary for n in pair_lengths)
        assert count > tokens_per_batch // boundary  # a full batch exists
        assert batches_per_bucket[boundary] == -(-count // (tokens_per_batch // boundary))
    # The declared epoch length is the real one.
    assert dataset.cardinality().numpy() == sum(batches_per_bucket.values())


def test_single_example_over_budget_gets_its_own_batch():
    pairs = [([5] * 30, [6] * 30), ([7] * 3, [8] * 3)]
    dataset = make_id_dataset(
        pairs, tokens_per_batch=16, max_length=32, bucket_boundaries=[8, 32], shuffle=False
    )
    shapes = sorted(source.shape for source, _, _ in batches_as_arrays(dataset))
    # 31 tokens > the 16-token budget: alone in a batch of one.
    assert shapes == [(1, 8), (1, 32)]


def test_no_pair_lost_or_duplicated_over_an_epoch():
    pairs = random_id_pairs(500, 40, seed=2)
    pairs += pairs[:50]  # duplicates must be kept as duplicates
    dataset = make_id_dataset(pairs, tokens_per_batch=300, max_length=64, seed=3)
    expected = collections.Counter((tuple(s), tuple(t)) for s, t in pairs)
    assert collect_pairs(dataset) == expected


def test_deterministic_with_seed_and_shuffled_across_seeds():
    pairs = random_id_pairs(300, 30, seed=4)

    def run(seed):
        return batches_as_arrays(
            make_id_dataset(pairs, tokens_per_batch=200, max_length=32, seed=seed)
        )

    first, again, other = run(11), run(11), run(12)
    assert len(first) == len(again)
    for a, b in zip(first, again):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    same = len(first) == len(other) and all(
        all(np.array_equal(x, y) for x, y in zip(a, b)) for a, b in zip(first, other)
    )
    assert not same


def test_no_shuffle_when_not_training():
    pairs = random_id_pairs(200, 30, seed=5)
    runs = [
        batches_as_arrays(make_id_dataset(pairs, tokens_per_batch=200, max_length=32, training=False))
        for _ in range(2)
    ]
    flat = [row for batch in runs[0] for row in batch[2]]
    # Unshuffled: within a bucket, pairs keep their input order.
    first_rows = [strip_row(row, trailing=EOS) for row in runs[0][0][2]]
    members = [list(t) for _, t in pairs]
    positions = [members.index(row) for row in first_rows]
    assert positions == sorted(positions)
    assert len(flat) == 200
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize("on_long", ["drop", "truncate"])
def test_long_pairs_are_dropped_or_truncated_and_counted(on_long):
    pairs = random_id_pairs(300, 40, seed=6)
    max_length = 20
    # Length with eos (source, labels) or bos (decoder input).
    long = [max(len(s), len(t)) + 1 > max_length for s, t in pairs]
    assert 0 < sum(long) < len(pairs)
    stats = PipelineStats()
    dataset = make_id_dataset(
        pairs, tokens_per_batch=128, max_length=max_length, on_long=on_long, seed=0, stats=stats
    )
    got = collect_pairs(dataset)
    if on_long == "drop":
        expected = collections.Counter(
            (tuple(s), tuple(t)) for (s, t), is_long in zip(pairs, long) if not is_long
        )
        assert stats.result() == {"examples": 300, "dropped_long": sum(long), "truncated": 0}
    else:
        cut = max_length - 1
        expected = collections.Counter((tuple(s[:cut]), tuple(t[:cut])) for s, t in pairs)
        assert stats.result() == {"examples": 300, "dropped_long": 0, "truncated": sum(long)}
    assert got == expected
    for source, target_in, labels in batches_as_arrays(dataset):
        assert source.shape[1] <= 24 and labels.shape[1] <= 24  # boundary of max_length 20


def test_drop_remainder_keeps_only_full_batches():
    pairs = random_id_pairs(300, 30, seed=7)
    boundaries = [8, 16, 32]
    dataset = make_id_dataset(
        pairs, tokens_per_batch=128, max_length=32, bucket_boundaries=boundaries,
        seed=0, drop_remainder=True,
    )
    batches = batches_as_arrays(dataset)
    assert batches
    assert all(s.shape[0] == 128 // s.shape[1] for s, _, _ in batches)


def test_pad_to_longest_in_batch():
    pairs = random_id_pairs(200, 30, seed=8)
    dataset = make_id_dataset(
        pairs, tokens_per_batch=256, max_length=32, seed=0, pad_to_bucket_boundary=False
    )
    for source, target_in, labels in batches_as_arrays(dataset):
        # Some row reaches the padded length: no column is all padding.
        assert (source[:, -1] != PAD).any()
        assert (labels[:, -1] != PAD).any()
        assert source.shape[0] * max(source.shape[1], labels.shape[1]) <= 256


def test_repeat_reshuffles_each_pass():
    pairs = [([i + 4], [i + 4]) for i in range(40)]
    dataset = make_id_dataset(
        pairs, tokens_per_batch=80, max_length=8, bucket_boundaries=[8], seed=0, repeat=True
    )
    batches = [labels.numpy()[:, 0].tolist() for _, labels in dataset.take(8)]
    first_pass = sum(batches[:4], [])
    second_pass = sum(batches[4:], [])
    assert sorted(first_pass) == sorted(second_pass) == list(range(4, 44))
    assert first_pass != second_pass


def test_argument_errors():
    pairs = random_id_pairs(10, 5)
    with pytest.raises(ValueError, match="bucket_boundaries.*max_length"):
        make_id_dataset(pairs, max_length=64, bucket_boundaries=[8, 32])
    with pytest.raises(ValueError, match="strictly increasing"):
        make_id_dataset(pairs, max_length=16, bucket_boundaries=[16, 8, 16])
    with pytest.raises(ValueError, match="tokens_per_batch"):
        make_id_dataset(pairs, tokens_per_batch=0)
    with pytest.raises(ValueError, match="on_long"):
        make_id_dataset(pairs, on_long="skip")
    with pytest.raises(ValueError, match=r"id_pairs\[1\]"):
        make_id_dataset([([4], [5]), ([4],)])


# ------------------------------------------------------------ from strings

WORDS_EN = "the a house cat dog sees small big red green runs walks quickly today old new".split()
WORDS_DE = "das ein Haus Katze Hund sieht klein groß rot grün läuft geht schnell heute alt neu".split()


def make_text_pairs(count, seed=0):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        indices = rng.integers(0, len(WORDS_EN), size=int(rng.integers(1, 12)))
        pairs.append(
            (" ".join(WORDS_EN[i] for i in indices), " ".join(WORDS_DE[i] for i in indices))
        )
    return pairs


@pytest.fixture(scope="module")
def text_pairs():
    return make_text_pairs(300)


@pytest.fixture(scope="module")
def tokenizer(text_pairs):
    return SubwordTokenizer.train(text_pairs, 120, seed=1)


def decode_batches(dataset, tokenizer):
    decoded = collections.Counter()
    for inputs, labels in dataset:
        sources = tokenizer.detokenize(inputs["source"]).numpy()
        targets = tokenizer.detokenize(labels).numpy()
        targets_in = tokenizer.detokenize(inputs["target"]).numpy()
        assert (targets == targets_in).all()
        for s, t in zip(sources, targets):
            decoded[(s.decode(), t.decode())] += 1
    return decoded


def test_make_dataset_tokenizes_in_graph_with_bos_eos(text_pairs, tokenizer):
    dataset = make_dataset(text_pairs, tokenizer, tokens_per_batch=200, max_length=64, seed=0)
    spec_inputs, spec_labels = dataset.element_spec
    assert set(spec_inputs) == {"source", "target"}
    assert spec_labels.dtype == tf.int32
    # Independent reference: SentencePiece's own encoder plus the convention.
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    expected = collections.Counter(
        (tuple(processor.encode(s)), tuple(processor.encode(t))) for s, t in text_pairs
    )
    assert collect_pairs(dataset) == expected
    assert decode_batches(dataset, tokenizer) == collections.Counter(text_pairs)


def test_make_dataset_counts_batches_and_stats_once(text_pairs, tokenizer):
    stats = PipelineStats()
    dataset = make_dataset(
        text_pairs, tokenizer, tokens_per_batch=200, max_length=12, seed=0, stats=stats
    )
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    long = sum(
        max(len(processor.encode(s)), len(processor.encode(t))) + 1 > 12 for s, t in text_pairs
    )
    assert 0 < long < len(text_pairs)
    # Built: the cache is filled and counted once, and the epoch length known.
    assert stats.result() == {"examples": len(text_pairs), "dropped_long": long, "truncated": 0}
    epochs = [sum(1 for _ in dataset) for _ in range(2)]
    assert epochs == [dataset.cardinality().numpy()] * 2
    assert stats.result()["examples"] == len(text_pairs)
    assert sum(len(labels) for _, labels in dataset) == len(text_pairs) - long


@pytest.mark.parametrize("form", ["tuple_dataset", "dict_dataset", "corpus"])
def test_make_dataset_input_forms(text_pairs, tokenizer, tmp_path, form):
    pairs = text_pairs[:60]
    if form == "tuple_dataset":
        data = tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs]))
    elif form == "dict_dataset":
        data = tf.data.Dataset.from_tensor_slices(
            {"source": [s for s, _ in pairs], "target": [t for _, t in pairs]}
        )
    else:
        path = tmp_path / "c.jsonl"
        path.write_text("".join(json.dumps({"en": s, "de": t}) + "\n" for s, t in pairs))
        data = read_jsonl(path)
    dataset = make_dataset(data, tokenizer, tokens_per_batch=200, max_length=64, seed=0)
    assert decode_batches(dataset, tokenizer) == collections.Counter(pairs)
    # A second epoch reads the input again.
    assert sum(decode_batches(dataset, tokenizer).values()) == len(pairs)


def test_make_dataset_rejects_bad_data(tokenizer):
    with pytest.raises(ValueError, match=r"data\[1\]"):
        make_dataset([("a", "b"), ("only one",)], tokenizer)
    with pytest.raises(ValueError, match="no .source, target. pair"):
        make_dataset([], tokenizer)
    with pytest.raises(ValueError, match="one-shot iterator"):
        make_dataset(iter([("a", "b")]), tokenizer)
    with pytest.raises(ValueError, match="element_spec"):
        make_dataset(tf.data.Dataset.from_tensor_slices([1, 2]), tokenizer)


def test_cached_and_streamed_pipelines_agree(text_pairs, tokenizer):
    def run(cache):
        return batches_as_arrays(
            make_dataset(text_pairs, tokenizer, tokens_per_batch=200, max_length=64,
                         shuffle=False, cache=cache)
        )

    cached, streamed = run(True), run(False)
    assert len(cached) == len(streamed)
    for a, b in zip(cached, streamed):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_feeds_keras_fit(text_pairs, tokenizer):
    import keras

    vocabulary_size = tokenizer.vocabulary_size
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    embedding = keras.layers.Embedding(vocabulary_size, 8)
    context = keras.ops.mean(embedding(source), axis=1, keepdims=True)
    hidden = embedding(target) + context
    logits = keras.layers.Dense(vocabulary_size)(hidden)
    model = keras.Model({"source": source, "target": target}, logits)
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD),
    )
    dataset = make_dataset(text_pairs[:100], tokenizer, tokens_per_batch=300, max_length=32, seed=0)
    steps = dataset.cardinality().numpy()
    assert steps == sum(1 for _ in dataset)
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(dataset, epochs=2, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2
    assert np.isfinite(history.history["loss"]).all()
    # The declared cardinality spares Keras its "ran out of data" guess.
    assert not [w for w in caught if "ran out of data" in str(w.message)]
