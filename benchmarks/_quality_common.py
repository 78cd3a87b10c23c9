"""What benchmarks/quality.py, its worker (_quality_worker.py) and the contenders share: the
corpora, the model size and limits, reading the prepared pairs, the training clock, the
trained-token count and the library versions. It imports neither, so they form no import cycle."""

import time

CORPORA = ("ddtp_en_de.jsonl.gz", "po_all.jsonl.gz")
SOURCE_KEY, TARGET_KEY = "en", "de"
MAX_CHARS = 600  # as recipes/parallel_text: drops the few paragraph-long DDTP pairs
MAX_LENGTH = 128  # tokens per side in training, EOS/BOS included; longer test sources are cut
MAX_EXTRA_LENGTH = 50  # outputs stop at source length + 50 (the paper)
MODEL = dict(d_model=256, num_layers=3, num_heads=4, d_ff=1024, dropout=0.1)
SAVE_EVERY_STEPS = 500
DECODE_BATCH = 64


def config():
    """The size and limits every contender's worker gets (OpenNMT-tf's as JSON)."""
    return {**MODEL, "max_length": MAX_LENGTH, "max_extra_length": MAX_EXTRA_LENGTH,
            "decode_batch": DECODE_BATCH, "save_every_steps": SAVE_EVERY_STEPS}


def search():
    """The search every contender decodes with (_contender.SEARCH at these limits)."""
    return {"beam_size": 4, "alpha": 0.6, "max_extra_length": MAX_EXTRA_LENGTH, "batch_size": DECODE_BATCH,
            "max_source_length": MAX_LENGTH}


def size(vocabulary_size):
    """MODEL in the contenders' `build(size)` keys."""
    return {"vocab": vocabulary_size, "d_model": MODEL["d_model"], "layers": MODEL["num_layers"],
            "heads": MODEL["num_heads"], "d_ff": MODEL["d_ff"], "dropout": MODEL["dropout"]}


def read_pairs(path):
    from keras_transformer.data import load_corpus

    pairs, _ = load_corpus(str(path), source_key=SOURCE_KEY, target_key=TARGET_KEY, max_chars=MAX_CHARS)
    return pairs


class Clock:
    """Training clock shared by our workers: started at construction, updated per step.

    Every `every` steps it prints the mean training loss of those steps
    (Keras' logs hold the running mean of the epoch so far; the interval mean
    is recovered from two of them).
    """

    def __init__(self, minutes, every=100):
        self.started = time.monotonic()
        self.deadline = self.started + 60 * minutes
        self.ended = self.started
        self.steps = 0
        self.every = every
        self._sum = 0.0  # loss summed over the steps of the current epoch so far
        self._batch = -1  # index within the epoch of the last step seen
        self._mark = 0.0  # self._sum at the last report, minus the sums of finished epochs

    def step(self, logs=None, batch=None):
        self.steps += 1
        self.ended = time.monotonic()
        loss = (logs or {}).get("loss")
        if loss is not None:
            batch = self._batch + 1 if batch is None else batch
            if batch <= self._batch:  # a new epoch: its running mean restarted
                self._mark -= self._sum
                self._sum = 0.0
            self._sum = float(loss) * (batch + 1)
            self._batch = batch
        if self.steps % self.every == 0:
            text = ""
            if loss is not None:
                text = f", loss (mean of the last {self.every} steps) {(self._sum - self._mark) / self.every:.3f}"
                self._mark = self._sum
            print(f"step {self.steps}: {(self.ended - self.started) / 60:.1f} min{text}", flush=True)
        return self.ended > self.deadline

    @property
    def seconds(self):
        return self.ended - self.started


def count_trained_tokens(pairs, tokenizer, steps, tokens_per_batch, seed, bucket_boundaries=None):
    """Non-pad (source, target) tokens in the first `steps` batches of the training pipeline.

    `runs.train` and the KerasHub worker read `make_dataset(..., repeat=True)`
    with a fixed seed, so a fresh pipeline with the same options replays the
    batches they trained on. Target tokens count the labels (EOS included).
    """
    import numpy as np

    from keras_transformer.data import make_dataset

    dataset = make_dataset(pairs, tokenizer, tokens_per_batch=tokens_per_batch, max_length=MAX_LENGTH,
                           bucket_boundaries=bucket_boundaries, training=True, seed=seed, repeat=True)
    source = target = 0
    for inputs, labels in dataset.take(steps).as_numpy_iterator():
        source += int(np.count_nonzero(inputs["source"]))
        target += int(np.count_nonzero(labels))
    return source, target


def versions():
    import keras
    import tensorflow as tf

    found = {"tensorflow": tf.__version__, "keras": keras.__version__}
    try:
        import keras_hub

        found["keras_hub"] = keras_hub.__version__
    except ImportError:
        pass
    return found
