"""The benchmarks' workloads and contenders: the training batches and model size of the throughput
benchmarks, the shape every training contender has (and ours), what quality.py and its workers share, and
the paper's model sizes on a GPU.
Standard library only at import (Keras, TensorFlow and numpy inside the functions): OpenNMT-tf's process,
in its own environment, imports it too.
"""

import runpy
import time

from benchmarks._harness import ROOT

# ------------------------------------------------------------ training workloads
# The batches every throughput contender trains on (train_throughput.py) and the model size SIZE.

SIZE = dict(vocab=8000, d_model=256, layers=3, heads=4, d_ff=1024, dropout=0.1)
BATCH, LENGTH = 64, 32
NUM_BATCHES = 16  # distinct batches, cycled
CORPORA = ("ddtp_en_de.jsonl.gz", "po_all.jsonl.gz")  # under --data-dir: the real-text workload, quality.py's
REAL_TOKENS_PER_BATCH = 2048
MAX_LENGTH = 128  # tokens per side in training, EOS/BOS included; longer test sources are cut
SOURCE_KEY, TARGET_KEY = "en", "de"
MAX_CHARS = 600  # as recipes/parallel_text: drops the few paragraph-long DDTP pairs
PAD, BOS, EOS = 0, 2, 3


def read_pairs(path):
    """The (source, target) pairs of a corpus file, filtered as every benchmark filters them."""
    from keras_transformer.data import load_corpus

    pairs, _ = load_corpus(str(path), source_key=SOURCE_KEY, target_key=TARGET_KEY, max_chars=MAX_CHARS)
    return pairs


def make_batches(seed=0, vocabulary=SIZE["vocab"], batch=BATCH, length=LENGTH, count=NUM_BATCHES):
    """The synthetic workload: a list of `count` (source, target_in, labels) int32 arrays, random ordinary ids."""
    import numpy as np

    rng = np.random.default_rng(seed)
    # Ids 4.. are ordinary tokens (0 pad, 1 unk, 2 bos, 3 eos).
    source = rng.integers(4, vocabulary, size=(count, batch, length), dtype="int32")
    target = rng.integers(4, vocabulary, size=(count, batch, length + 1), dtype="int32")
    target[:, :, 0] = BOS
    return [(source[i], target[i, :, :-1], target[i, :, 1:]) for i in range(count)]


def target_tokens(batches):
    """Non-pad target tokens of each batch."""
    return [int((labels != PAD).sum()) for _, _, labels in batches]


def peak_memory_mb():
    """Peak resident memory of this process in MB: VmHWM, not ru_maxrss, which Linux hands on from a parent
    to the children it starts. Self-contained: OpenNMT-tf's process runs it too."""
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
    """Runs model.fit over the batches, cycled by tf.data (one element per batch: shapes may differ); returns
    seconds for the timed steps."""
    import functools

    import keras
    import tensorflow as tf

    elements = [tf.data.Dataset.from_tensors(({"source": s, "target": t}, y)) for s, t, y in batches]
    dataset = functools.reduce(lambda a, b: a.concatenate(b), elements).repeat().prefetch(4)

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == warmup - 1:
                self.start = time.perf_counter()

        def on_train_end(self, logs=None):
            self.end = time.perf_counter()

    clock = Clock()
    model.fit(dataset, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[clock])
    return clock.end - clock.start

# ------------------------------------------------------------ contenders
# The shape every contender has (train_throughput.py, quality.py), and ours; the peers' harnesses
# are _contender_keras_hub.py, _contender_torch.py and _contender_opennmt.py.

SEARCH = {"beam_size": 4, "alpha": 0.6, "max_extra_length": 50, "batch_size": 64, "max_source_length": MAX_LENGTH}


class Contender:
    """The one shape of a benchmark contender (a harness around one implementation of the Transformer):
    `build`, `train_steps`, `train_for`, `decode`, as docs/benchmarks.md's "The shared harness" says;
    `name`, `label` (what the row is) and `backend` (the KERAS_BACKEND its process needs)."""
    name = ""
    label = ""
    backend = "tensorflow"

    def build(self, size, policy=None):
        raise NotImplementedError(f"{self.name}: no in-process model")

    def train_steps(self, model, batches, steps, warmup):
        """Keras contenders: `model.fit` over the cycled batches, timed from the end of the warm-up."""
        return timed_steps(timed_fit(model, batches, steps, warmup), batches, steps, warmup)

    def train_for(self, model, dataset, minutes):
        """Keras contenders: `model.fit` on `dataset` until the first step that ends past `minutes`."""
        import keras

        class TimeLimit(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.clock = Clock(minutes)  # constructed just before fit: the first step's tracing counts

            def on_train_batch_end(self, batch, logs=None):
                if self.clock.step(logs, batch):
                    self.model.stop_training = True

        limit = TimeLimit()
        # shuffle=False: the pipeline shuffles (Keras would only warn that it ignores this).
        model.fit(dataset, epochs=1, steps_per_epoch=10**8, callbacks=[limit], shuffle=False, verbose=0)
        return limit.clock

    def decode(self, model, tokenizer, sources, search=SEARCH):
        raise NotImplementedError(f"{self.name}: no decoding harness")


def timed_steps(seconds, batches, steps, warmup):
    """What `train_steps` returns: the timed steps' seconds and non-pad target tokens."""
    counts = target_tokens(batches)
    tokens = sum(counts[step % len(batches)] for step in range(warmup, warmup + steps))
    return {"seconds": seconds, "steps": steps, "target_tokens": tokens}


def set_policy(policy):
    """Sets the global Keras dtype policy before a model is built (None: leave float32)."""
    if policy and policy != "none":
        import keras

        keras.config.set_dtype_policy(policy)


def compile_ours(model, d_model, jit_compile="auto", optimizer=None):
    """Our loss and optimizer (`paper_optimizer` unless `optimizer` is given, as quality.py's settings
    do): what every contender labelled "our loss and paper_optimizer" trains with."""
    from keras_transformer.training import LabelSmoothedCrossEntropy, paper_optimizer

    model.compile(optimizer=optimizer or paper_optimizer(d_model), loss=LabelSmoothedCrossEntropy(0.1),
                  jit_compile=jit_compile)
    return model


class Ours(Contender):
    """Ours: `keras_transformer.Transformer` ("tiny" preset at the given size), our loss and
    `paper_optimizer`, and `decoding.Translator` (beam search with the GNMT length penalty, XLA)."""

    def __init__(self, name="ours-tf", label="ours, TensorFlow, plain graph", backend="tensorflow",
                 jit_compile=False, policy=None):
        self.name, self.label, self.backend = name, label, backend
        self.jit_compile, self.policy = jit_compile, policy

    def build(self, size, policy=None, optimizer=None):
        import keras_transformer as kt

        set_policy(policy or self.policy)
        model = kt.Transformer.from_preset(
            "tiny", vocabulary_size=size["vocab"], d_model=size["d_model"], num_heads=size["heads"],
            d_ff=size["d_ff"], num_encoder_layers=size["layers"], num_decoder_layers=size["layers"],
            dropout=size["dropout"],
        )
        return compile_ours(model, size["d_model"], jit_compile=self.jit_compile, optimizer=optimizer)

    def decode(self, model, tokenizer, sources, search=SEARCH):
        from keras_transformer.decoding import Translator

        translator = Translator(model, tokenizer, beam_size=search["beam_size"], alpha=search["alpha"],
                                max_extra_length=search["max_extra_length"],
                                max_source_length=search["max_source_length"], batch_size=search["batch_size"],
                                jit_compile=True)
        return translator.translate(sources)

    @staticmethod
    def search_description(search=SEARCH):
        return f"beam {search['beam_size']}, alpha {search['alpha']}, XLA"


THROUGHPUT = {
    "ours-tf": Ours(),
    "ours-tf-xla": Ours("ours-tf-xla", "ours, TensorFlow, XLA", jit_compile=True),
    "ours-jax": Ours("ours-jax", "ours, JAX (jit)", backend="jax", jit_compile=True),
    # Mixed precision (bfloat16 matmuls, float32 weights and loss): AMX/AVX512-BF16 CPUs run
    # bfloat16 matmuls ~2x faster. Same model, other numerics: compared with each other.
    "ours-tf-bf16": Ours("ours-tf-bf16", "ours, mixed_bfloat16, plain graph", policy="mixed_bfloat16"),
}

# ------------------------------------------------------------ time to quality
# What quality.py, its worker (_quality_worker.py) and the contenders share: the corpora (CORPORA),
# the model size and limits, reading the prepared pairs and the training clock.

MODEL = dict(d_model=SIZE["d_model"], num_layers=SIZE["layers"], num_heads=SIZE["heads"], d_ff=SIZE["d_ff"],
             dropout=SIZE["dropout"])  # SIZE in the keys of the workers' configurations
SAVE_EVERY_STEPS = 500


# The size and limits every contender's worker gets (OpenNMT-tf's as JSON).
WORKER_CONFIG = {**MODEL, "max_length": MAX_LENGTH, "max_extra_length": SEARCH["max_extra_length"],
                 "decode_batch": SEARCH["batch_size"], "save_every_steps": SAVE_EVERY_STEPS}


class Clock:
    """Training clock of our quality workers: started at construction, updated per step; every `every` steps
    it prints the mean loss of those steps (recovered from two of Keras' running means of the epoch)."""

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


# ------------------------------------------------------------ the paper's models on one GPU
# What gpu.py and its table share.

# The model sizes' one home, read without importing the package (and Keras).
PRESETS = runpy.run_path(str(ROOT / "keras_transformer" / "models" / "presets.py"))["PRESETS"]
VOCABULARY = 37000  # gpu.py's shared vocabulary
# Section 5.2: base steps took about 0.4 s, big steps 1.0 s, on 8 P100s, with
# batches of about 25,000 source and 25,000 target tokens.
PAPER_SECONDS_PER_STEP = {"base": 0.4, "big": 1.0}
PAPER_TARGET_TOKENS = 25000
# Dense bf16 tensor-core peak of the H100 SXM and the H200 (the same GH100 chip and clocks).
DENSE_BF16_PEAK_TFLOPS = 989.0


def gpu_size(preset):
    """A preset's model size in SIZE's keys, with gpu.py's vocabulary."""
    size = PRESETS[preset]
    return dict(vocab=VOCABULARY, d_model=size["d_model"], d_ff=size["d_ff"], heads=size["num_heads"],
                layers=size["num_encoder_layers"], dropout=size["dropout"])


def training_products(size, batch, source_length, target_length):
    """The matrix products of one training step at `size` (SIZE's keys), as (batch, m, k, n) each: every
    forward Y = X W brings dX = dY W^T and dW = X^T dY; attention products are batched over pairs and heads.
    Nothing else counts."""
    d, f, v, n, h = (size[k] for k in ("d_model", "d_ff", "vocab", "layers", "heads"))
    s, t, depth = source_length, target_length, d // h
    sources, targets, heads = batch * s, batch * t, batch * h
    forward = []
    for _ in range(n):  # encoder layer: q, k, v, output; attention; feed-forward
        forward += [(1, sources, d, d)] * 4
        forward += [(heads, s, depth, s), (heads, s, s, depth)]
        forward += [(1, sources, d, f), (1, sources, f, d)]
    for _ in range(n):  # decoder layer
        forward += [(1, targets, d, d)] * 4 + [(heads, t, depth, t), (heads, t, t, depth)]  # self-attention
        forward += [(1, targets, d, d)] * 2 + [(1, sources, d, d)] * 2  # cross q, output; k, v of the encoder
        forward += [(heads, t, depth, s), (heads, t, s, depth)]
        forward += [(1, targets, d, f), (1, targets, f, d)]
    forward.append((1, targets, d, v))  # pre-softmax projection
    products = []
    for b, m, k, n_ in forward:
        products += [(b, m, k, n_), (b, m, n_, k), (b, k, m, n_)]
    return products


def training_flops(size, batch, source_length, target_length):
    """Matrix-product FLOPs of one training step (forward + backward = 3x forward)."""
    return sum(2 * b * m * k * n for b, m, k, n in training_products(size, batch, source_length, target_length))
