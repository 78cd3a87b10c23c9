"""A run's training data: prepared once from the configuration, then a batch plan and a stream.

`prepare(config)` is what `keras-transformer prepare` and the first `train`
do (see `data.prepare`); `training_batches` gives `train` the number of
steps of an epoch and the batches from any step on, for one process or for
one worker of a cluster.
"""

import logging
from pathlib import Path

import keras

from keras_transformer._tensorflow import tensorflow
from keras_transformer.data.corpus import CorpusError

log = logging.getLogger("keras_transformer")


class RunError(RuntimeError):
    """A run directory or its inputs are unusable; the message says which file."""


# The files of a run directory (keras_transformer.run describes the layout).
CONFIG_FILE = "config.json"
MODEL_FILE = "model.keras"
TOKENIZER_FILE = "tokenizer.model"
# An imported Marian model's tokenizer (`keras-transformer import`): a folder in
# Transformers' MarianTokenizer layout (see data/marian_tokenizer.py).
MARIAN_TOKENIZER_DIR = "marian_tokenizer"


def prepared_dir(config):
    """Where the run's prepared data lives: data.prepared_dir, or OUTPUT_DIR/prepared."""
    return Path(config["data"]["prepared_dir"] or Path(config["output_dir"]) / "prepared")


def _settings(config):
    """What decides the prepared content, besides the input files and the tokenizer."""
    from keras_transformer.data.corpus import is_jsonl

    data = config["data"]
    reader = {"max_chars": data["max_chars"]}
    if is_jsonl(data["train"]):
        reader.update(source_key=data["source_key"], target_key=data["target_key"])
    settings = {f"data.{key}": value for key, value in reader.items()}
    settings.update({f"data.{key}": data[key] for key in ("vocabulary_size", "tokenizer_model_type",
                                                          "user_defined_symbols", "tokenizer_sample_pairs",
                                                          "tokenizer_seed", "pairs_per_shard")})
    return reader, settings


def prepare(config, on_change="rebuild", build=True, verify=False):
    """Prepares the training corpus of `config` once (`data.prepare`): the
    tokenizer and shards of token ids in `prepared_dir(config)`. The run's
    own tokenizer (OUTPUT_DIR/tokenizer.model, or an imported run's
    OUTPUT_DIR/marian_tokenizer/; e.g. adopted by training.init_from) is
    used when there is one. Returns a `Prepared`.

    `build=False` only checks (raising `data.prepare.PrepareError` unless
    the data is prepared and up to date): a worker waiting for the chief.
    `verify` checks every file's SHA-256, not only those whose stat changed."""
    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.data.corpus import open_corpus
    from keras_transformer.data.prepare import PrepareError
    from keras_transformer.data.prepare import prepare as prepare_data

    data, seed = config["data"], config["data"]["tokenizer_seed"]
    path = data["train"]
    if not path:
        raise RunError("the configuration has no data.train corpus (set data.train).")
    reader, settings = _settings(config)
    symbols = (data["user_defined_symbols"] or "").split()
    run_tokenizer = Path(config["output_dir"]) / TOKENIZER_FILE
    marian_tokenizer = Path(config["output_dir"]) / MARIAN_TOKENIZER_DIR
    proto = encoder = None
    if not run_tokenizer.is_file() and marian_tokenizer.is_dir():
        # An imported Marian run's tokenizer (adopted by training.init_from): its two
        # SentencePiece models and vocabulary encode the corpus, in plain Python.
        from keras_transformer.data.marian_tokenizer import MarianTokenizer

        try:
            tokenizer = MarianTokenizer.load(marian_tokenizer)
        except (OSError, ValueError) as error:
            raise RunError(str(error)) from None
        encoder = tokenizer.pair_encoder()
        if symbols:
            raise RunError(f"data.user_defined_symbols: {marian_tokenizer} is an imported model's tokenizer, "
                           "which takes no new pieces; drop the setting.")
        if build:
            print(f"tokenizer: reusing {marian_tokenizer} ({tokenizer.vocabulary_size} ids)", flush=True)
    elif run_tokenizer.is_file():
        proto = run_tokenizer.read_bytes()
        tokenizer = SubwordTokenizer(proto)
        missing = [s for s in symbols if tokenizer.id_to_piece(tokenizer.piece_to_id(s)) != s]
        if missing:
            raise RunError(f"{run_tokenizer}: no piece for {' '.join(missing)} (data.user_defined_symbols); "
                           "it was trained without them. Use a new output_dir.")
        if build:
            print(f"tokenizer: reusing {run_tokenizer} ({tokenizer.vocabulary_size} pieces)", flush=True)

    def train_tokenizer(sample):
        return SubwordTokenizer.train(
            sample, vocabulary_size=data["vocabulary_size"], model_type=data["tokenizer_model_type"], seed=seed,
            user_defined_symbols=symbols, input_sentence_size=2 * data["tokenizer_sample_pairs"]).proto

    inputs = [path] + ([data["train_target"]] if data["train_target"] else [])
    directory = prepared_dir(config)
    try:
        prepared = prepare_data(
            directory, inputs=inputs, open_pairs=lambda: open_corpus(path, data["train_target"], **reader),
            settings=settings, tokenizer_proto=proto, encoder=encoder, train_tokenizer=train_tokenizer,
            sample_pairs=data["tokenizer_sample_pairs"], seed=seed, pairs_per_shard=data["pairs_per_shard"],
            on_change=on_change, log=lambda message: print(message, flush=True), build=build, verify=verify,
            processes=data["prepare_processes"] if encoder is None else 1)
    except PrepareError as error:
        if not build:
            raise
        if on_change == "error":
            raise RunError(f"{error} The run's checkpoints were trained on the data as it was: restore it, "
                           "or train in a new output_dir.") from None
        raise RunError(str(error)) from None
    except CorpusError as error:
        raise RunError(f"data.train {error}") from None
    if prepared.action == "up to date" and build:
        print(f"data.train {path}: prepared in {directory} ({prepared.num_pairs:,} pairs)", flush=True)
    return prepared


def training_batches(config, prepared, boundaries, worker=None):
    """`(steps_per_epoch, dataset_from, plan_record)`: `dataset_from(step)`
    gives the batches of this process (of this worker, in a cluster) from
    `step` on; `plan_record` is what decides them (see `check_plan`).

    The batch of every step is computed from the step (no pass over the
    data at start, no replay on resume); see `data.batch_plan`."""
    from keras_transformer.data.batch_plan import BatchPlan
    from keras_transformer.data.streaming import stream_batches

    training, max_length = config["training"], config["data"]["max_length"]
    lengths = prepared.lengths()
    if worker is None:
        plan = BatchPlan(lengths, boundaries, training["tokens_per_batch"], seed=training["seed"],
                         max_length=max_length)
    else:
        # One share per replica of the cluster; this worker reads its replicas' shares, from one
        # plan (one permutation a host, not one a replica).
        replicas = worker.local_replicas
        try:
            plan = BatchPlan(lengths, boundaries, training["tokens_per_batch"], seed=training["seed"],
                             max_length=max_length, num_workers=worker.count * replicas,
                             shares=range(worker.index * replicas, (worker.index + 1) * replicas))
        except ValueError as error:
            raise RunError(f"data.train {config['data']['train']}: {error}.") from None
    del lengths
    if plan.num_pairs == 0:
        raise RunError(f"data.train {config['data']['train']}: no pair fits data.max_length {max_length}.")
    if plan.left_out:
        print(f"data.train: {plan.left_out:,} of {prepared.num_pairs:,} pairs are longer than data.max_length "
              f"{max_length} tokens and left out", flush=True)
    from keras_transformer.data.manifest import content_sha256

    record = {"prepared_sha256": content_sha256(prepared.manifest), **plan.record()}
    shards = prepared.shards()
    if worker is None:
        return plan.steps_per_epoch, lambda step: stream_batches(shards, plan, step), record
    return plan.steps_per_epoch, lambda step: worker.strategy.distribute_datasets_from_function(
        lambda context: stream_batches(shards, plan, step)), record


PLAN_FILE = "plan.json"  # in the run's checkpoint directory

# What each entry of a plan record comes from, for the message that names a change.
_PLAN_SOURCES = {
    "prepared_sha256": "the prepared data (data.prepared_dir: its tokenizer and shards)",
    "boundaries": "the bucket boundaries (data.bucket_width)",
    "tokens_per_batch": "training.tokens_per_batch",
    "max_length": "data.max_length",
    "seed": "training.seed",
    "shares": "the number of replicas (workers x devices per worker)",
    "pairs": "the pairs that fit data.max_length",
    "steps_per_epoch": "the steps per epoch",
    "epoch_0_sha256": "the order of epoch 0 (NumPy permutes differently: another NumPy version?)",
}


def read_plan(checkpoint_dir):
    """The plan record of a run's checkpoints (`check_plan`), or None."""
    import json

    path = Path(checkpoint_dir) / PLAN_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as error:
        raise RunError(f"{path}: not a plan record ({error}); delete it to record the plan afresh.") from None


def check_plan(checkpoint_dir, record, has_checkpoints):
    """Records the batch plan of a run's checkpoints, or checks that a resumed run plans as they did.

    The batch of a step follows from the record's inputs; a run resumed with other ones would
    train some pairs of its epoch twice and others not at all. A run without checkpoints (re)writes
    `checkpoint_dir/plan.json`; one with checkpoints must match it, else `RunError` names every
    changed input and how to go on. Checkpoints from before plan records get one now."""
    from keras_transformer.data.manifest import atomic_write

    recorded = read_plan(checkpoint_dir) if has_checkpoints else None
    path = Path(checkpoint_dir) / PLAN_FILE
    if recorded is None:
        import json

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(str(path), json.dumps(record, indent=1).encode())  # a new file: a hard-linked copy stays
        return
    changed = [key for key in _PLAN_SOURCES if recorded.get(key) != record.get(key)]
    if not changed:
        return
    named = [key for key in changed if key not in ("pairs", "steps_per_epoch")] or changed
    details = "; ".join(f"{_PLAN_SOURCES[key]}: {_short(recorded.get(key))} then, {_short(record.get(key))} now"
                        for key in named)
    raise RunError(
        f"{path}: this run's checkpoints were trained on another batch plan: {details}. Resuming would "
        "train some pairs of the epoch twice and others not at all. Set these back to resume, or train in "
        "a new output_dir.")


def _short(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:28] + "..." + text[-28:]


def read_pairs(config, split):
    """The text pairs of the run's data.<split> corpus (train, valid or test)."""
    from keras_transformer.data.corpus import is_jsonl, open_corpus

    data = config["data"]
    path = data[split]
    if not path:
        raise RunError(f"the configuration has no data.{split} corpus (set data.{split}).")
    options = {"max_chars": data["max_chars"]}
    if is_jsonl(path):
        options.update(source_key=data["source_key"], target_key=data["target_key"])
    pairs, stats = open_corpus(path, data.get(f"{split}_target"), **options).load()
    log.info("%s: %s", path, stats)
    print(f"data.{split} {path}: {stats}", flush=True)
    if not pairs:
        raise RunError(f"data.{split} {path}: no usable sentence pairs ({stats}).")
    return pairs


def _train_step_uses_xla():
    """Keras' `jit_compile="auto"` rule: XLA under JAX, and under TensorFlow only with a GPU/TPU."""
    if keras.backend.backend() == "jax":
        return True
    tf = tensorflow()
    if tf is not None:
        return any(device.device_type != "CPU" for device in tf.config.list_physical_devices())
    return False


def bucket_boundaries(config):
    """Padded batch lengths for `data.bucket_width` (None: the pipeline's geometric default).

    Narrow buckets waste less compute on padding (on the English-German
    data of `benchmarks/`, 1-token buckets hold ~97% real target tokens per
    padded token, 4-token ones ~88-91%, the geometric ones ~81%), but every
    distinct length is a distinct shape. A step that XLA compiles is
    compiled once per shape, so with XLA the default stays the pipeline's
    dozen geometric buckets; without it TensorFlow traces one shape-generic
    graph (Keras' `reduce_retracing`) and the default is 1-token buckets
    (OpenNMT-tf's default too), which trained 1-21% (median 11%) more real
    tokens per second than 4-token ones in five alternating pairs of
    `benchmarks/train_throughput.py` runs.
    """
    width = config["data"]["bucket_width"]
    if width is None:
        if _train_step_uses_xla():
            return None
        width = 1
    if width < 1:
        raise RunError(f"data.bucket_width: must be >= 1, got {width}.")
    from keras_transformer.data import default_bucket_boundaries

    return default_bucket_boundaries(config["data"]["max_length"], min_boundary=width, growth=1, multiple=width)
