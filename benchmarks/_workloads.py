"""The training workloads every throughput contender trains on, and the Keras step clock.

train_throughput.py times training steps
on the same batches: SIZE is the model every contender builds (the "tiny"
configuration), `load_batches` gives the fixed-shape random batches or the
real-text ones (see train_throughput.py's docstring), `cycled_dataset` and
`warmed_up` feed them to a compiled Keras model, and `timed_fit` is the
Keras contenders' `train_steps`.
"""

import time
from pathlib import Path

SIZE = dict(vocab=8000, d_model=256, layers=3, heads=4, d_ff=1024, dropout=0.1)
BATCH, LENGTH = 64, 32
NUM_BATCHES = 16  # distinct batches, cycled
REAL_CORPORA = ("ddtp_en_de.jsonl.gz", "po_all.jsonl.gz")
REAL_TOKENS_PER_BATCH = 2048
REAL_NUM_BATCHES = 24
REAL_MAX_LENGTH = 128
PAD, BOS, EOS = 0, 2, 3


def make_batches(seed=0):
    """The synthetic workload: a list of (source, target_in, labels) int32 arrays."""
    import numpy as np

    rng = np.random.default_rng(seed)
    # Ids 4.. are ordinary tokens (0 pad, 1 unk, 2 bos, 3 eos).
    source = rng.integers(4, SIZE["vocab"], size=(NUM_BATCHES, BATCH, LENGTH), dtype="int32")
    target = rng.integers(4, SIZE["vocab"], size=(NUM_BATCHES, BATCH, LENGTH + 1), dtype="int32")
    target[:, :, 0] = BOS
    return [(source[i], target[i, :, :-1], target[i, :, 1:]) for i in range(NUM_BATCHES)]


def make_real_batches(data_dir, work, bucket_width):
    """The real-text workload (see the module docstring), cached in `work`."""
    import numpy as np

    cache = work / f"batches_width{bucket_width}.npz"
    if cache.exists():
        arrays = np.load(cache)
        return [tuple(arrays[f"{name}{i}"] for name in ("source", "target", "labels"))
                for i in range(len(arrays.files) // 3)]
    paths = [Path(data_dir) / name for name in REAL_CORPORA]
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise SystemExit(f"--workload real: {', '.join(missing)} not found (set --data-dir)")
    from keras_transformer.data import SubwordTokenizer, default_bucket_boundaries, load_corpus, make_dataset

    pairs = []
    for path in paths:
        pairs += load_corpus(str(path), source_key="en", target_key="de", max_chars=600)[0]
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = SubwordTokenizer.train(pairs, vocabulary_size=SIZE["vocab"], model_type="unigram", seed=0)
    if tokenizer.vocabulary_size != SIZE["vocab"] or (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) != (
            PAD, BOS, EOS):
        raise SystemExit("--workload real: the tokenizer's vocabulary or special ids differ from the benchmark's")
    dataset = make_dataset(
        pairs, tokenizer, tokens_per_batch=REAL_TOKENS_PER_BATCH, max_length=REAL_MAX_LENGTH,
        bucket_boundaries=default_bucket_boundaries(
            REAL_MAX_LENGTH, min_boundary=bucket_width, growth=1, multiple=bucket_width),
        training=True, seed=0, cache=False,
    )
    batches = []
    for inputs, labels in dataset.take(REAL_NUM_BATCHES):
        batches.append((inputs["source"].numpy(), inputs["target"].numpy(), labels.numpy()))
    np.savez(cache, **{f"{name}{i}": array for i, batch in enumerate(batches)
                       for name, array in zip(("source", "target", "labels"), batch)})
    return batches


def load_batches(workload, data_dir, work_dir, bucket_width=1):
    """The batches of `workload` ("synthetic" or "real")."""
    if workload == "real":
        return make_real_batches(data_dir, Path(work_dir), bucket_width)
    return make_batches()


def cycled_dataset(batches):
    """The batches as a tf.data pipeline that cycles them, one element per batch (shapes may differ)."""
    import functools

    import tensorflow as tf

    elements = [tf.data.Dataset.from_tensors(({"source": s, "target": t}, y)) for s, t, y in batches]
    return functools.reduce(lambda a, b: a.concatenate(b), elements).repeat().prefetch(4)


def warmed_up(model, dataset, steps):
    """An iterator over `dataset` after `steps` untimed steps of the compiled `model`'s train function
    (the first through `fit`, which builds the optimizer)."""
    model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
    iterator = iter(dataset)
    for _ in range(steps):
        model.train_function(iterator)
    return iterator


def target_tokens(batches):
    """Non-pad target tokens of each batch."""
    return [int((labels != PAD).sum()) for _, _, labels in batches]


def peak_memory_mb():
    """Peak resident memory of this process in MB.

    Not ru_maxrss: Linux hands a parent's on to the children it starts (fork,
    then exec), so every contender would report at least this script's own
    peak. VmHWM belongs to the process's address space, which exec replaces.
    (Also run inside OpenNMT-tf's process: self-contained.)
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_fit(model, batches, steps, warmup):
    """Runs model.fit over the cycled batches; returns seconds for the timed steps."""
    import keras

    dataset = cycled_dataset(batches)

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == warmup - 1:
                self.start = time.perf_counter()

        def on_train_end(self, logs=None):
            self.end = time.perf_counter()

    clock = Clock()
    model.fit(dataset, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[clock])
    return clock.end - clock.start
