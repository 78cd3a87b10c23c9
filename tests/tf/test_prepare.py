"""Preparing a corpus once: shards whose ids are the in-graph tokenizer's,
a second run that does nothing, a changed input or a damaged shard named,
and batches streamed from any step exactly as from the start."""

import json
import os

import numpy as np
import pytest

from keras_transformer import config as config_lib
from keras_transformer.data import SubwordTokenizer, read_tsv
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.prepare import MANIFEST_FILE, PrepareError, prepare, read_manifest, verify
from keras_transformer.data.streaming import stream_batches
from keras_transformer.run import data as run_data, train as run_train
from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID

WORDS = "the a red blue house car tree book reads sees big small old new green".split()
GERMAN = "das ein rot blau Haus Auto Baum Buch liest sieht groß klein alt neu grün".split()


def write_corpus(path, count, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for index in range(count):
        picks = rng.integers(0, len(WORDS), size=rng.integers(1, 12))
        lines.append(f"{index} {' '.join(WORDS[p] for p in picks)}\t{' '.join(GERMAN[p] for p in picks)} {index}\n")
    lines.insert(5, "\tonly a target\n")  # skipped (empty source), and counted
    path.write_text("".join(lines), encoding="utf-8")
    return path


def prepare_tsv(directory, corpus, messages=None, **options):
    def train_tokenizer(sample):
        return SubwordTokenizer.train(sample, vocabulary_size=120, model_type="bpe", seed=0,
                                      hard_vocab_limit=False).proto

    return prepare(directory, inputs=[str(corpus)], open_pairs=lambda: read_tsv(corpus),
                   settings={"vocabulary_size": 120}, train_tokenizer=train_tokenizer,
                   log=(messages.append if messages is not None else lambda message: None), **options)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    work = tmp_path_factory.mktemp("prepare")
    corpus = write_corpus(work / "corpus.tsv", 500)
    return corpus, prepare_tsv(work / "data", corpus, pairs_per_shard=128)


def test_shards_hold_the_in_graph_tokenizer_ids_of_every_pair(prepared):
    corpus, data = prepared
    pairs, stats = read_tsv(corpus).load()
    assert stats.skipped_empty == 1 and data.manifest["counts"]["corpus"]["skipped_empty"] == 1
    assert data.num_pairs == len(pairs) == 500
    assert [entry["pairs"] for entry in data.manifest["shards"]] == [128, 128, 128, 116]
    tokenizer = SubwordTokenizer.load(data.tokenizer_path)
    sources = tokenizer.tokenize([s for s, _ in pairs]).to_list()
    targets = tokenizer.tokenize([t for _, t in pairs]).to_list()
    assert data.shards().pairs(np.arange(500)) == list(zip(sources, targets))
    expected_lengths = [max(len(s), len(t)) + 1 for s, t in zip(sources, targets)]
    assert data.lengths().tolist() == expected_lengths


def test_preparing_again_does_nothing(prepared):
    corpus, data = prepared
    top = os.path.dirname(data.directory)
    assert sorted(os.listdir(top)) == [".lock", "current", "v1"] and data.directory == os.path.join(top, "v1")

    def files():
        return {os.path.join(root, name): os.stat(os.path.join(root, name)).st_mtime_ns
                for root, _, names in os.walk(top) for name in names}

    before = files()
    again = prepare_tsv(top, corpus, pairs_per_shard=128)
    assert again.action == "up to date" and again.manifest == data.manifest and again.directory == data.directory
    assert files() == before


def test_a_changed_input_is_named(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.tsv", 60)
    first = prepare_tsv(tmp_path / "data", corpus)
    os.utime(corpus, ns=(1, 1))  # touched, same bytes: not a change
    assert prepare_tsv(tmp_path / "data", corpus).action == "up to date"
    write_corpus(corpus, 61)
    with pytest.raises(PrepareError, match=f"{corpus} changed since it was prepared"):
        prepare_tsv(tmp_path / "data", corpus, on_change="error")
    messages = []
    rebuilt = prepare_tsv(tmp_path / "data", corpus, messages)
    assert rebuilt.action == "prepared" and rebuilt.num_pairs == 61
    assert any(f"{corpus} changed" in message for message in messages)
    # A new version: the old one, which a run may be reading, is still whole.
    assert rebuilt.directory != first.directory
    verify(first.directory, first.manifest)
    assert read_manifest(tmp_path / "data") == rebuilt.manifest


def test_two_concurrent_preparations_of_one_directory_make_one_version(tmp_path):
    """The second waits for the first's lock and finds its version up to date. It starts
    while the first trains its tokenizer (without the lock it would write the same files)."""
    import threading

    corpus = write_corpus(tmp_path / "corpus.tsv", 80)
    results = {}

    def second():
        results["second"] = prepare_tsv(tmp_path / "data", corpus)

    other = threading.Thread(target=second)

    def train_tokenizer(sample):
        other.start()
        other.join(timeout=2)  # it cannot finish: it waits for the lock this preparation holds
        return SubwordTokenizer.train(sample, vocabulary_size=120, model_type="bpe", seed=0,
                                      hard_vocab_limit=False).proto

    results["first"] = prepare(tmp_path / "data", inputs=[str(corpus)], open_pairs=lambda: read_tsv(corpus),
                               settings={"vocabulary_size": 120}, train_tokenizer=train_tokenizer,
                               log=lambda message: None)
    other.join()
    first, second = results["first"], results["second"]
    assert (first.action, second.action) == ("prepared", "up to date")
    assert first.directory == second.directory and sorted(os.listdir(tmp_path / "data")) == [
        ".lock", "current", "v1"]
    verify(first.directory, first.manifest)
    assert first.shards().pairs(range(80)) == second.shards().pairs(range(80))


def test_runs_with_other_seeds_share_a_prepared_directory(tmp_path):
    """training.seed does not seed the tokenizer (data.tokenizer_seed does): a second run with
    another seed finds the first's data up to date, and the first can resume on it."""
    from keras_transformer.run.data import prepare as prepare_run

    corpus = write_corpus(tmp_path / "corpus.tsv", 60)

    def config(run, seed):
        return config_lib.resolve([], None, [f"output_dir={tmp_path / run}", f"data.train={corpus}",
                                             f"data.prepared_dir={tmp_path / 'shared'}", "data.vocabulary_size=60",
                                             f"training.seed={seed}"])

    first = prepare_run(config("a", 1))
    second = prepare_run(config("b", 2))
    assert (first.action, second.action) == ("prepared", "up to date") and second.directory == first.directory
    assert prepare_run(config("a", 1), on_change="error").directory == first.directory
    with pytest.raises(run_data.RunError, match="data.tokenizer_seed 0 -> 3"):  # the seed that does decide
        prepare_run(config_lib.merge(config("a", 1), {"data": {"tokenizer_seed": 3}}), on_change="error")


def test_a_damaged_shard_is_named_and_written_again_alike(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.tsv", 200)
    data = prepare_tsv(tmp_path / "data", corpus, pairs_per_shard=64)
    shard = os.path.join(data.directory, "shard-00001.tokens")
    original = open(shard, "rb").read()
    with open(shard, "r+b") as handle:  # same size, one id changed
        handle.seek(10)
        handle.write(bytes([original[10] ^ 0xFF]))
    messages = []
    again = prepare_tsv(tmp_path / "data", corpus, messages, pairs_per_shard=64)
    assert any(shard in message and "damaged" in message for message in messages), messages
    assert again.action == "prepared" and again.manifest["shards"] == data.manifest["shards"]
    assert again.directory != data.directory  # a new version: a run reading the old one keeps it
    shard = os.path.join(again.directory, "shard-00001.tokens")
    assert open(shard, "rb").read() == original
    os.truncate(shard, 100)
    messages.clear()
    prepare_tsv(tmp_path / "data", corpus, messages, pairs_per_shard=64)
    assert any(shard in message and "truncated" in message for message in messages), messages


def test_a_damaged_lengths_file_is_named_and_written_again(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.tsv", 50)
    data = prepare_tsv(tmp_path / "data", corpus)
    lengths = os.path.join(data.directory, "lengths.u16")
    original = open(lengths, "rb").read()
    with open(lengths, "r+b") as handle:  # same size, one length changed: training would fail at its step
        handle.write(bytes([original[0] ^ 0x40]))
    with pytest.raises(PrepareError, match=f"{lengths}: its SHA-256 differs from the manifest's"):
        prepare_tsv(tmp_path / "data", corpus, build=False)  # a worker checking the chief's data
    messages = []
    again = prepare_tsv(tmp_path / "data", corpus, messages)
    assert any(lengths in message and "damaged" in message for message in messages), messages
    assert again.action == "prepared"
    assert open(os.path.join(again.directory, "lengths.u16"), "rb").read() == original


def test_an_unfinished_directory_is_prepared_again(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.tsv", 50)
    data = prepare_tsv(tmp_path / "data", corpus)
    os.remove(os.path.join(data.directory, MANIFEST_FILE))  # as a kill before the manifest leaves it
    assert read_manifest(data.directory) is None
    assert prepare_tsv(tmp_path / "data", corpus).action == "prepared"


def batches(dataset, count):
    return [(x["source"].numpy(), x["target"].numpy(), y.numpy()) for x, y in dataset.take(count)]


def test_stream_from_any_step_equals_the_stream_from_the_start(prepared):
    _, data = prepared
    plan = BatchPlan(data.lengths(), [8, 16, 24, 32], 96, seed=4)
    shards = data.shards()
    total = plan.steps_per_epoch + 5  # across an epoch boundary
    from_start = batches(stream_batches(shards, plan, 0), total)
    for start in (1, plan.steps_per_epoch - 1, plan.steps_per_epoch + 2):
        for a, b in zip(batches(stream_batches(shards, plan, start), total - start), from_start[start:]):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)


def test_streamed_batches_follow_the_training_convention(prepared):
    corpus, data = prepared
    pairs, _ = read_tsv(corpus).load()
    tokenizer = SubwordTokenizer.load(data.tokenizer_path)
    plan = BatchPlan(data.lengths(), [8, 16, 24, 32], 96, seed=0)
    seen = []
    for step, (source, decoder_input, labels) in enumerate(batches(stream_batches(data.shards(), plan, 0),
                                                                   plan.steps_per_epoch)):
        pair_ids, width = plan.batch(step)
        assert source.shape == labels.shape == decoder_input.shape == (len(pair_ids), width)
        assert source.dtype == np.int32
        for row, pair_id in enumerate(pair_ids):
            s = tokenizer.tokenize(pairs[pair_id][0]).numpy().tolist()
            t = tokenizer.tokenize(pairs[pair_id][1]).numpy().tolist()
            pad = lambda ids: ids + [PAD_ID] * (width - len(ids))  # noqa: E731
            assert source[row].tolist() == pad(s + [EOS_ID])
            assert decoder_input[row].tolist() == pad([BOS_ID] + t)
            assert labels[row].tolist() == pad(t + [EOS_ID])
        seen.extend(pair_ids.tolist())
    assert sorted(seen) == [i for i, n in enumerate(data.lengths()) if n <= 32]


def test_train_prepares_on_first_use_and_refuses_a_changed_corpus_under_checkpoints(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.tsv", 80)
    assignments = [f"output_dir={tmp_path / 'run'}", f"data.train={corpus}", "data.vocabulary_size=100",
                   "data.max_length=24", "model.d_model=16", "model.d_ff=32", "model.num_heads=2",
                   "model.num_encoder_layers=1", "model.num_decoder_layers=1", "training.tokens_per_batch=200",
                   "training.max_steps=2", "training.save_every_steps=1", "training.average_last=1"]
    config = config_lib.resolve([], None, assignments)
    run_train.train(config)
    prepared_version = tmp_path / "run" / "prepared" / "v1"
    manifest = json.loads((prepared_version / MANIFEST_FILE).read_text())
    assert manifest["inputs"][0]["path"] == str(corpus)
    assert (tmp_path / "run" / "tokenizer.model").read_bytes() == (prepared_version / "tokenizer.model").read_bytes()
    write_corpus(corpus, 81)
    with pytest.raises(run_data.RunError, match=f"{corpus} changed since it was prepared.*new output_dir"):
        run_train.train(config_lib.resolve([], None, assignments + ["training.max_steps=3"]))
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("ckpt-*")) == [
        "ckpt-000000001.weights.h5", "ckpt-000000002.weights.h5"]  # nothing lost


class _WordEncoder:
    """An encoder that is no SentencePiece model: word i of a fixed list -> id 4 + i (others unk)."""

    def __init__(self, words):
        self.words = {word: 4 + index for index, word in enumerate(words)}
        self.files = {"words.txt": "\n".join(words).encode()}
        self.sha256 = "words-" + str(len(words))
        self.vocabulary_size = 4 + len(words)

    def encode_sources(self, texts):
        return [[self.words.get(word, 1) for word in text.split()] for text in texts]

    encode_targets = encode_sources


def test_an_encoder_instead_of_a_proto_gives_the_shards_and_decides_staleness(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.tsv", 20)
    pairs = list(read_tsv(corpus))
    encoder = _WordEncoder(WORDS + GERMAN)

    def run(encoder, **options):
        return prepare(tmp_path / "data", inputs=[str(corpus)], open_pairs=lambda: read_tsv(corpus), settings={},
                       encoder=encoder, log=lambda message: None, **options)

    first = run(encoder)
    assert first.action == "prepared" and read_manifest(first.directory)["tokenizer_sha256"] == "words-30"
    assert (tmp_path / "data" / "v1" / "words.txt").read_bytes() == encoder.files["words.txt"]
    assert not (tmp_path / "data" / "v1" / "tokenizer.model").exists()
    shards = first.shards()
    expected = [(encoder.encode_sources([s])[0], encoder.encode_targets([t])[0]) for s, t, *_ in pairs]
    assert shards.pairs(range(shards.num_pairs)) == expected
    assert run(encoder).action == "up to date"
    with pytest.raises(PrepareError, match="prepared with another tokenizer"):
        run(_WordEncoder(WORDS), on_change="error")
    (tmp_path / "data" / "v1" / "words.txt").write_bytes(b"damaged")
    assert not run(encoder).action == "up to date"  # the encoder's file is checked as tokenizer.model is
    with pytest.raises(ValueError, match="not both"):
        run(encoder, tokenizer_proto=b"x")


def test_a_start_checksums_only_the_files_whose_size_or_time_changed(tmp_path, monkeypatch):
    """Starts take seconds at any size: a file whose size and modification time are the manifest's
    is not read; one rewritten in place (same size, new time) is, and refused when its bytes
    differ. `verify=True` (`prepare --verify`) reads every file."""
    from keras_transformer.data import shards as shards_module

    corpus = write_corpus(tmp_path / "corpus.tsv", 60)
    data = prepare_tsv(tmp_path / "data", corpus, pairs_per_shard=32)
    read = []
    checksum = shards_module.file_sha256
    monkeypatch.setattr(shards_module, "file_sha256", lambda path: read.append(os.path.basename(path))
                        or checksum(path))
    assert prepare_tsv(tmp_path / "data", corpus, build=False).action == "up to date" and read == []
    shard = os.path.join(data.directory, "shard-00001.tokens")
    recorded = os.stat(shard).st_mtime_ns
    assert data.manifest["file_stats"]["shard-00001.tokens"] == [os.path.getsize(shard), recorded]
    os.utime(shard, ns=(recorded + 10**9, recorded + 10**9))  # touched (a copy): read once, still the same
    assert prepare_tsv(tmp_path / "data", corpus, build=False).action == "up to date"
    assert read == ["shard-00001.tokens"]
    original = open(shard, "rb").read()
    with open(shard, "r+b") as handle:  # same size, one id changed, behind the manifest's back
        handle.seek(4)
        handle.write(bytes([original[4] ^ 0x01]))
    with pytest.raises(PrepareError, match=f"{shard}: its SHA-256 differs from the manifest's"):
        prepare_tsv(tmp_path / "data", corpus, build=False)
    os.utime(shard, ns=(recorded, recorded))  # and its time set back: only a full check sees it
    read.clear()
    assert prepare_tsv(tmp_path / "data", corpus, build=False).action == "up to date" and read == []
    with pytest.raises(PrepareError, match=f"{shard}: its SHA-256 differs"):
        prepare_tsv(tmp_path / "data", corpus, build=False, verify=True)
    assert read == ["lengths.u16", "shard-00000.tokens", "shard-00000.index", "shard-00001.tokens"]  # to the bad one


def test_a_killed_preparation_resumes_from_its_finished_shards(tmp_path, prepared):
    """A preparation that fails in shard 2 (the corpus stream breaks, as a kill would stop it) leaves
    shards 0 and 1 and its tokenizer; the next one keeps them (the same files: not tokenized again,
    no tokenizer trained) and ends with the data a preparation in one go makes."""
    _, whole = prepared
    corpus = write_corpus(tmp_path / "corpus.tsv", 500)  # the fixture's corpus
    trainings = []

    def train_tokenizer(sample):
        trainings.append(len(sample))
        return SubwordTokenizer.train(sample, vocabulary_size=120, model_type="bpe", seed=0,
                                      hard_vocab_limit=False).proto

    def breaking_stream():
        for index, pair in enumerate(read_tsv(corpus)):
            if index == 300:
                raise OSError("the disk went away")
            yield pair

    streams = iter([lambda: read_tsv(corpus), breaking_stream])
    options = dict(inputs=[str(corpus)], settings={"vocabulary_size": 120}, train_tokenizer=train_tokenizer,
                   pairs_per_shard=128)
    with pytest.raises(OSError, match="went away"):
        prepare(tmp_path / "data", open_pairs=lambda: next(streams)(), log=lambda message: None, **options)
    (building,) = [name for name in os.listdir(tmp_path / "data") if name.startswith(".building-")]
    kept = {name: os.stat(tmp_path / "data" / building / f"{name}.tokens") for name in ("shard-00000",
                                                                                          "shard-00001")}
    assert not os.path.exists(tmp_path / "data" / building / "shard-00002.tokens")
    messages = []
    resumed = prepare(tmp_path / "data", open_pairs=lambda: read_tsv(corpus), log=messages.append, **options)
    assert trainings == [500] and any("resuming" in m and "2 shards were finished" in m for m in messages)
    for name, before in kept.items():
        after = os.stat(os.path.join(resumed.directory, f"{name}.tokens"))
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(os.listdir(tmp_path / "data")) == [".lock", "current", "v1"]
    assert resumed.manifest["shards"] == whole.manifest["shards"]
    assert resumed.manifest["lengths_sha256"] == whole.manifest["lengths_sha256"]
    assert resumed.manifest["counts"] == whole.manifest["counts"]
    verify(resumed.directory, resumed.manifest)


def test_a_preparation_in_several_processes_writes_the_same_shards(tmp_path, prepared):
    corpus, whole = prepared
    proto = open(whole.tokenizer_path, "rb").read()
    parallel = prepare(tmp_path / "data", inputs=[str(corpus)], open_pairs=lambda: read_tsv(corpus),
                       settings={"vocabulary_size": 120}, tokenizer_proto=proto, pairs_per_shard=128, processes=2,
                       log=lambda message: None)
    assert parallel.manifest["shards"] == whole.manifest["shards"]
    assert parallel.manifest["lengths_sha256"] == whole.manifest["lengths_sha256"]
    assert parallel.manifest["counts"] == whole.manifest["counts"]


def test_batches_gather_pairs_from_anywhere_in_the_shards_as_a_pair_by_pair_read_does(prepared):
    """The reference reads each pair's index row and tokens from the files on its own."""
    _, data = prepared
    entries = data.manifest["shards"]
    reference = []
    for entry in entries:
        index = np.fromfile(os.path.join(data.directory, entry["name"] + ".index"), "<i8").reshape(-1, 3)
        tokens = np.fromfile(os.path.join(data.directory, entry["name"] + ".tokens"), data.manifest["token_dtype"])
        reference += [(tokens[s:s + a].tolist(), tokens[s + a:s + a + b].tolist()) for s, a, b in index]
    ids = np.random.default_rng(1).permutation(data.num_pairs)[:150]
    ids = np.concatenate([ids, [127, 128, 129, 3, 4, 5]])  # neighbours, across a shard's end too
    assert data.shards().pairs(ids) == [reference[i] for i in ids]
    source, _, labels = data.shards().batch(ids, 64)
    for row, i in enumerate(ids):
        assert source[row, :len(reference[i][0])].tolist() == reference[i][0]
        assert labels[row, :len(reference[i][1])].tolist() == reference[i][1]
