"""The in-process workers of benchmarks/quality.py (`quality.py --worker NAME`, TensorFlow backend):
"prepare" (split, tokenizer, OpenNMT-tf's text files in WORK/data), "ours" and "keras-hub" (train to the
budget, decode the test split: WORK/NAME/train.json, hypotheses.json) and "score". The training and decoding
are the contenders' harnesses; this is the benchmark's glue (data, clock, record fields)."""

import hashlib
import json
import shutil
import time
from pathlib import Path

from benchmarks._harness import versions
from benchmarks._workloads import (
    CORPORA, MAX_CHARS, MAX_LENGTH, MODEL, SAVE_EVERY_STEPS, SEARCH, SIZE, SOURCE_KEY, TARGET_KEY, Clock, read_pairs
)


def run(args):
    work = Path(args.work_dir)
    if args.worker == "prepare":
        prepare(args, work)
        return 0
    if args.worker == "score":
        score(work, args.contender)
        return 0
    contenders = {"ours": train_and_decode_ours, "keras-hub": train_and_decode_keras_hub}
    if args.worker not in contenders:
        raise SystemExit(f"unknown worker {args.worker!r}")
    out = work / args.worker
    settings = json.loads(args.settings_json)[args.worker]
    result = contenders[args.worker](work, out, args.minutes, settings, args.seed)
    (out / "train.json").write_text(json.dumps(result, indent=2))
    return 0


def fingerprint(args):
    inputs = []
    for name in CORPORA:
        stat = (Path(args.data_dir) / name).stat()
        inputs.append({"file": name, "bytes": stat.st_size, "mtime": int(stat.st_mtime)})
    return {"inputs": inputs, "test_size": args.test_size, "max_train_pairs": args.max_train_pairs,
            "vocabulary_size": args.vocabulary_size, "max_chars": MAX_CHARS, "max_length": MAX_LENGTH,
            "seed": args.seed, "version": 1}


def prepare(args, work):
    """Split, tokenizer and OpenNMT-tf text files in WORK/data (reused if unchanged)."""
    data = work / "data"
    fingerprint_now = fingerprint(args)
    split_file = data / "split.json"
    if split_file.is_file() and json.loads(split_file.read_text()).get("fingerprint") == fingerprint_now:
        print(f"reusing split and tokenizer in {data}", flush=True)
        return
    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    from keras_transformer.data import SubwordTokenizer, load_corpus

    records, inputs = [], []
    for name in CORPORA:
        path = Path(args.data_dir) / name
        pairs, stats = load_corpus(str(path), source_key=SOURCE_KEY, target_key=TARGET_KEY, max_chars=MAX_CHARS)
        print(f"{path}: {stats}", flush=True)
        inputs.append({"file": name, "read": stats.read, "kept": stats.kept})
        records.extend((source, target, None) for source, target in pairs)
    from keras_transformer.data.splits import split_by_hash

    splits = split_by_hash(records, args.test_size, 0)
    train = [(s, t) for s, t, _ in splits["train"]]
    test = [(s, t) for s, t, _ in splits["test"]]
    if args.max_train_pairs:
        train = train[: args.max_train_pairs]
    test_sources = {s for s, _ in test}
    if any(s in test_sources for s, _ in train):
        raise SystemExit("internal error: a test source sentence is also in the training split")
    from keras_transformer.data.corpus import write_jsonl

    for name, pairs in (("train", train), ("test", test)):
        write_jsonl(data / f"{name}.jsonl.gz", pairs, keys=(SOURCE_KEY, TARGET_KEY))
    print(f"split: train {len(train)}, test {len(test)} pairs -> {data}", flush=True)

    start = time.time()
    tokenizer = SubwordTokenizer.train(train, vocabulary_size=args.vocabulary_size, model_type="unigram",
                                       seed=args.seed)
    tokenizer.save(str(data / "tokenizer.model"))
    print(f"tokenizer: {tokenizer.vocabulary_size} pieces in {time.time() - start:.0f}s", flush=True)
    write_opennmt_files(data, train, test)
    split_file.write_text(json.dumps({
        "fingerprint": fingerprint_now, "method": "recipes/parallel_text split_by_hash (SHA-256 of the English side)",
        "inputs": inputs, "train_pairs": len(train), "test_pairs": len(test),
        "vocabulary_size": tokenizer.vocabulary_size,
        "test_sha256": hashlib.sha256(json.dumps(test, ensure_ascii=False).encode()).hexdigest(),
    }, indent=2))


def write_opennmt_files(data, train, test):
    """Space-separated SentencePiece pieces and a vocabulary with our ids: OpenNMT-tf reserves ids 0-2 for the
    first three lines and appends <unk>, so `<blank> <s> </s> piece_4 ... piece_{V-1}` holds ours' V ids."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(data / "tokenizer.model"))
    onmt = data / "opennmt"
    onmt.mkdir()
    pieces = [processor.id_to_piece(i) for i in range(4, processor.get_piece_size())]
    (onmt / "vocab.txt").write_text("<blank>\n<s>\n</s>\n" + "".join(p + "\n" for p in pieces), encoding="utf-8")

    def write(path, texts, limit=None):
        with open(path, "w", encoding="utf-8") as stream:
            for row in processor.encode(list(texts), out_type=str):
                stream.write(" ".join(row[:limit] if limit else row) + "\n")

    write(onmt / "train.src", (s for s, _ in train))
    write(onmt / "train.tgt", (t for _, t in train))
    # Sources are cut as ours are (MAX_LENGTH ids, EOS included).
    write(onmt / "test.src", (s for s, _ in test), limit=MAX_LENGTH - 1)


def score(work, contender):
    """Detokenizes (OpenNMT-tf pieces) and scores one contender's test output."""
    from keras_transformer.decoding.evaluation import corpus_scores

    data = work / "data"
    out = work / contender
    pairs = read_pairs(data / "test.jsonl.gz")
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]
    if (out / "hypotheses.json").is_file():
        hypotheses = json.loads((out / "hypotheses.json").read_text())
    else:
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_file=str(data / "tokenizer.model"))
        lines = (out / "predictions.txt").read_text(encoding="utf-8").split("\n")[: len(references)]
        hypotheses = [processor.decode_pieces(line.split()) for line in lines]
    if len(hypotheses) != len(references):
        raise SystemExit(f"{contender}: {len(hypotheses)} outputs for {len(references)} test sentences")
    scores = corpus_scores(hypotheses, references, tokenized_bleu=False)
    scores["samples"] = [{"source": s, "hypothesis": h, "reference": r}
                         for s, h, r in list(zip(sources, hypotheses, references))[:3]]
    print(f"BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}", flush=True)
    (out / "scores.json").write_text(json.dumps(scores, indent=2, ensure_ascii=False))


def train_and_decode_ours(work, out, minutes, settings, seed):
    """`run.train.train`, what a user runs (checkpoints every 500 steps inside the budget), then ours'
    `decode`."""
    import keras

    from benchmarks._workloads import Ours
    from keras_transformer import config as config_lib
    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.run import data as run_data, train as run_train, trained as run_trained

    data = work / "data"
    run_dir = out / "run"
    run_dir.mkdir(parents=True)
    shutil.copyfile(data / "tokenizer.model", run_dir / run_data.TOKENIZER_FILE)  # run.train.train reuses it
    config = config_lib.merge(config_lib.defaults(), {
        "output_dir": str(run_dir),
        "model": {"preset": "tiny", "dropout": MODEL["dropout"], "norm_first": settings["norm_first"]},
        "data": {"train": str(data / "train.jsonl.gz"), "valid": None, "test": str(data / "test.jsonl.gz"),
                 "source_key": SOURCE_KEY, "target_key": TARGET_KEY, "max_chars": MAX_CHARS,
                 "max_length": MAX_LENGTH},
        "training": {"tokens_per_batch": settings["tokens_per_batch"], "epochs": 100000,
                     "max_minutes": minutes, "warmup_steps": settings["warmup_steps"],
                     "learning_rate_scale": settings["learning_rate_scale"], "label_smoothing": 0.1,
                     "save_every_steps": SAVE_EVERY_STEPS, "keep_checkpoints": 2, "average_last": 1,
                     "seed": seed, "mixed_precision": None if settings["mixed_precision"] == "none"
                     else settings["mixed_precision"]},
    }, origin="benchmarks/quality.py")

    clock = {}

    class ClockCallback(keras.callbacks.Callback):
        """A training clock started with fit, counting steps (run.train.train keeps its own time limit)."""

        def on_train_begin(self, logs=None):
            clock["clock"] = Clock(minutes)

        def on_train_batch_end(self, batch, logs=None):
            clock["clock"].step(logs, batch)

    run_train.train(config, verbose=0, callbacks=[ClockCallback()])
    if "clock" not in clock:
        raise SystemExit("run.train.train did not start training; cannot time it")
    trained = clock["clock"]
    print(f"trained {trained.steps} steps in {trained.seconds / 60:.2f} min", flush=True)

    tokenizer = SubwordTokenizer.load(str(run_dir / run_data.TOKENIZER_FILE))
    boundaries = run_data.bucket_boundaries(config)
    target_tokens = count_trained_tokens(read_pairs(data / "train.jsonl.gz"), tokenizer, trained.steps,
                                            settings["tokens_per_batch"], seed, boundaries)
    model = run_trained.load_model(run_dir)
    return decoded(Ours(), model, tokenizer, work, out, trained, target_tokens, {
        "optimizer_used": "TransformerAdam(0.9, 0.98, 1e-9) (densified sparse gradients), NoamSchedule",
        "checkpoint_every_steps": SAVE_EVERY_STEPS, "bucket_boundaries": boundaries})


def make_optimizer(settings, d_model):
    """(optimizer, description) for the `optimizer` setting, with the Noam schedule: "densified" (default),
    `paper_optimizer`, ours (sparse embedding gradients made dense first), or "stock", Keras' Adam, which on
    TensorFlow squares a repeated row's slices one by one (what a KerasHub user gets: a labelled row)."""
    import keras

    from keras_transformer.training import NoamSchedule, paper_optimizer

    choice = settings.get("optimizer", "densified")
    warmup, scale = settings["warmup_steps"], settings["learning_rate_scale"]
    if choice == "densified":
        return (paper_optimizer(d_model, warmup_steps=warmup, scale=scale),
                "TransformerAdam(0.9, 0.98, 1e-9) (densified sparse gradients, as ours), NoamSchedule")
    if choice == "stock":
        schedule = NoamSchedule(d_model, warmup_steps=warmup, scale=scale)
        return (keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                "stock keras.optimizers.Adam(0.9, 0.98, 1e-9), NoamSchedule")
    raise ValueError(f"optimizer setting {choice!r}: expected 'densified' or 'stock'")


def train_and_decode_keras_hub(work, out, minutes, settings, seed):
    """The KerasHub-layer model (`architecture` setting: "tied", like for like, or "keras-io"),
    `model.fit` on the batches ours trains on, our loss, then its BeamSampler search."""
    import keras

    from benchmarks._contender_keras_hub import KerasHub
    from keras_transformer.data import SubwordTokenizer, make_dataset
    from keras_transformer.run import data as run_data

    keras.utils.set_random_seed(seed)
    data = work / "data"
    tokenizer = SubwordTokenizer.load(str(data / "tokenizer.model"))
    pairs = read_pairs(data / "train.jsonl.gz")
    # The length buckets ours gets from run.train.train's default (model.fit compiles
    # this model's step as it compiles ours), so both train on the same batches.
    boundaries = run_data.bucket_boundaries({"data": {"bucket_width": None, "max_length": MAX_LENGTH}})
    dataset = make_dataset(pairs, tokenizer, tokens_per_batch=settings["tokens_per_batch"], max_length=MAX_LENGTH,
                           training=True, seed=seed, repeat=True, bucket_boundaries=boundaries)
    optimizer, optimizer_used = make_optimizer(settings, MODEL["d_model"])
    harness = KerasHub("keras-hub", architecture=settings["architecture"])
    model = harness.build(dict(SIZE, vocab=tokenizer.vocabulary_size), policy=settings["mixed_precision"], optimizer=optimizer,
                          norm_first=settings["norm_first"])
    trained = harness.train_for(model, dataset, minutes)
    print(f"trained {trained.steps} steps in {trained.seconds / 60:.2f} min", flush=True)
    target_tokens = count_trained_tokens(pairs, tokenizer, trained.steps, settings["tokens_per_batch"], seed,
                                            boundaries)
    return decoded(harness, model, tokenizer, work, out, trained, target_tokens, {
        "optimizer_used": optimizer_used, "checkpoint_every_steps": None, "bucket_boundaries": boundaries})


def count_trained_tokens(pairs, tokenizer, steps, tokens_per_batch, seed, bucket_boundaries=None):
    """Non-pad target tokens (labels, EOS included) in the first `steps` batches of the training pipeline: a
    fresh `make_dataset(..., repeat=True)` with the same seed replays what the workers trained on."""
    import numpy as np

    from keras_transformer.data import make_dataset

    dataset = make_dataset(pairs, tokenizer, tokens_per_batch=tokens_per_batch, max_length=MAX_LENGTH,
                           bucket_boundaries=bucket_boundaries, training=True, seed=seed, repeat=True)
    return sum(int(np.count_nonzero(labels)) for _, labels in dataset.take(steps).as_numpy_iterator())


def decoded(harness, model, tokenizer, work, out, trained, target_tokens, settings):
    """Decodes the test split with the contender's search; the worker's result (train.json)."""
    import keras

    sources = [s for s, _ in read_pairs(work / "data" / "test.jsonl.gz")]
    start = time.time()
    hypotheses = harness.decode(model, tokenizer, sources, SEARCH)
    decode_seconds = time.time() - start
    (out / "hypotheses.json").write_text(json.dumps(hypotheses, ensure_ascii=False))
    return {
        "steps": trained.steps, "train_seconds": trained.seconds, "decode_seconds": decode_seconds,
        "target_tokens": target_tokens, "search": harness.search_description(SEARCH),
        "settings": {"optimizer_used": settings["optimizer_used"], "loss": "label smoothing 0.1",
                     "checkpoint_every_steps": settings["checkpoint_every_steps"],
                     "parameters": model.count_params(),
                     "bucket_boundaries": settings["bucket_boundaries"] or "make_dataset default (geometric)"},
        "versions": {**versions("tensorflow", "keras", "keras-hub"), "keras_backend": keras.backend.backend()},
    }
