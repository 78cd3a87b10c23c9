"""Training throughput: keras_transformer against the alternatives, in one run.

Every contender trains the same architecture (the "tiny" configuration:
d_model 256, 3+3 layers, 4 heads, d_ff 1024, shared 8k vocabulary, post-LN,
dropout 0.1, Adam) on the same batches: 64 pairs of 32 source and 32 target
tokens, none of them padding. Each runs in its own process (a Keras backend
is chosen at import; OpenNMT-tf needs its own TensorFlow), warms up, then
times a fixed number of steps. Reported: non-pad target tokens per second,
the ratio to ours, the process's peak resident memory, and achieved FLOP/s as
a share of this machine's float32 matrix-multiply peak (a 4096x4096
tf.matmul) measured in the same run, and each float32 rate as a share of the
"matmul floor": the rate the step's own matrix products reach when timed
alone, with nothing else in the step (`matmul_floor_seconds`).

    .venv/bin/python benchmarks/train_throughput.py            # all contenders
    .venv/bin/python benchmarks/train_throughput.py --only ours-tf keras-hub
    .venv/bin/python benchmarks/train_throughput.py --rounds 3 --only ours-tf keras-hub opennmt-tf
    .venv/bin/python benchmarks/train_throughput.py --workload real  # real text

KerasHub rows: `keras-hub-tied` is the like-for-like one, KerasHub layers at
our exact size (one `ReversibleEmbedding` shared by source and target and
tied to the output, sinusoidal positions, our `LabelSmoothedCrossEntropy(0.1)`
and `paper_optimizer`: `build_keras_hub_tied`); `keras-hub` is the keras-io
example's architecture (untied output, learned positions, stock Adam; about
11.9M parameters against our 7.6M), kept as a labelled row.

OpenNMT-tf's rate is its target tokens over its time, summed over the
intervals it logs (the first, with the tracing, left out). On the real
workload it batches the sentences itself, so its share of the matmul floor,
which is computed from our batches, is marked as such.

Each run appends a record (machine, load, commit, command, every round's
seconds, steps and target tokens per contender) to `--record` (default
benchmarks/results/train_throughput.jsonl); `benchmarks/report.py` makes the
tables and charts from them.

`--workload real` replaces the fixed-shape batches by token-bucketed batches
of real English-German text (ddtp_en_de + po_all from `--data-dir`, default
../shared/data): a SentencePiece model of 8,000 pieces trained on them, then
`make_dataset` with 1-token length buckets (`--bucket-width`; OpenNMT-tf's
`length_bucket_width` is 1 too) and 2,048 tokens per batch (a fixed seed),
of which the first 24 batches are every contender's workload,
cycled (variable shapes and padding, as in real training). The Keras and
torch contenders train on exactly these batches; OpenNMT-tf, which has its
own batching, gets the same sentences in the same order with its own token
batching at the same budget. Warm-up then covers one full cycle, so every
shape is traced (or compiled) before the clock starts.

OpenNMT-tf runs when `--opennmt-python` (default `.venv-opennmt/bin/python`)
exists: `python3.11 -m venv .venv-opennmt && .venv-opennmt/bin/pip install
"tensorflow==2.13.1" "opennmt-tf==2.32.0"`.
"""

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import _records  # noqa: E402
CONFIG = dict(vocab=8000, d_model=256, layers=3, heads=4, d_ff=1024, dropout=0.1)
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
    source = rng.integers(4, CONFIG["vocab"], size=(NUM_BATCHES, BATCH, LENGTH), dtype="int32")
    target = rng.integers(4, CONFIG["vocab"], size=(NUM_BATCHES, BATCH, LENGTH + 1), dtype="int32")
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
    tokenizer = SubwordTokenizer.train(pairs, vocabulary_size=CONFIG["vocab"], model_type="unigram", seed=0)
    if tokenizer.vocabulary_size != CONFIG["vocab"] or (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) != (
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


def training_products(batch, source_length, target_length):
    """The matrix products of one training step, as (batch, m, k, n) each.

    Every forward product Y = X W (X: m x k, W: k x n) of the model below
    brings two backward ones, dX = dY W^T and dW = X^T dY. The attention
    products are batched over pairs and heads; the others take the tokens of
    the batch as rows. Embedding lookups, bias additions and the rest of the
    step are not matrix products and are not counted.
    """
    d, f, v, n, h = (CONFIG[k] for k in ("d_model", "d_ff", "vocab", "layers", "heads"))
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


def training_flops(batch, source_length, target_length):
    """Matrix-multiply FLOPs of one training step (forward + backward = 3x forward)."""
    return sum(2 * b * m * k * n for b, m, k, n in training_products(batch, source_length, target_length))


def matmul_floor_seconds(batches, repeats=3):
    """Seconds for the matrix products of one pass over `batches`, and nothing else.

    For each batch shape, every product of its training step (random float32
    operands) runs in one tf.function with no dependencies between them, so
    the executor may overlap them as it likes; each shape's time is the best
    of `repeats` calls after a warm-up. A training step that does anything
    besides these products, in any order its dependencies allow, takes
    longer: this is the bound a contender's rate is measured against.
    """
    import tensorflow as tf

    seconds_by_shape = {}
    total = 0.0
    for source, _, labels in batches:
        shape = (labels.shape[0], source.shape[1], labels.shape[1])
        if shape not in seconds_by_shape:
            operands = []
            for b, m, k, n in training_products(*shape):
                lead = () if b == 1 else (b,)
                operands.append((tf.random.normal(lead + (m, k)), tf.random.normal(lead + (k, n))))

            @tf.function
            def products():
                # A sum of each product keeps it from being pruned or sliced.
                return tf.add_n([tf.reduce_sum(tf.matmul(a, b)) for a, b in operands])

            products().numpy()
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                products().numpy()
                best = min(best, time.perf_counter() - start)
            seconds_by_shape[shape] = best
            del operands, products
        total += seconds_by_shape[shape]
    return total


def cycle_flops_and_tokens(batches):
    """(FLOPs, non-pad target tokens) of one pass over the batches, padding included in the FLOPs."""
    flops = sum(training_flops(labels.shape[0], source.shape[1], labels.shape[1]) for source, _, labels in batches)
    return flops, sum(target_tokens(batches))


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


def run_ours(batches, steps, warmup, jit_compile, policy=None):
    import keras

    import keras_transformer as kt
    from keras_transformer.training import LabelSmoothedCrossEntropy, paper_optimizer

    if policy:
        keras.config.set_dtype_policy(policy)

    model = kt.Transformer.from_preset(
        "tiny",
        vocabulary_size=CONFIG["vocab"],
        d_model=CONFIG["d_model"],
        num_heads=CONFIG["heads"],
        d_ff=CONFIG["d_ff"],
        num_encoder_layers=CONFIG["layers"],
        num_decoder_layers=CONFIG["layers"],
        dropout=CONFIG["dropout"],
    )
    model.compile(
        optimizer=paper_optimizer(CONFIG["d_model"]),
        loss=LabelSmoothedCrossEntropy(0.1),
        jit_compile=jit_compile,
    )
    return timed_fit(model, batches, steps, warmup), keras.backend.backend()


def run_keras_hub(batches, steps, warmup, policy=None):
    """The keras-io translation example's architecture, built from KerasHub layers."""
    import keras
    import keras_hub

    if policy:
        keras.config.set_dtype_policy(policy)
    d, f, h, v, n = (CONFIG[k] for k in ("d_model", "d_ff", "heads", "vocab", "layers"))
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    x = keras_hub.layers.TokenAndPositionEmbedding(v, 512, d, mask_zero=True)(source)
    for _ in range(n):
        x = keras_hub.layers.TransformerEncoder(f, h, dropout=CONFIG["dropout"])(x)
    y = keras_hub.layers.TokenAndPositionEmbedding(v, 512, d, mask_zero=True)(target)
    for _ in range(n):
        y = keras_hub.layers.TransformerDecoder(f, h, dropout=CONFIG["dropout"])(y, x)
    logits = keras.layers.Dense(v)(y)
    model = keras.Model({"source": source, "target": target}, logits)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
    )
    return timed_fit(model, batches, steps, warmup), "tensorflow"


def build_keras_hub_tied(policy=None):
    """KerasHub layers at our exact size: the like-for-like KerasHub contender.

    As ours: one token embedding (`keras_hub.layers.ReversibleEmbedding`)
    shared by source and target and tied to the output projection, scaled
    by sqrt(d_model), plus sinusoidal positions (`SinePositionEncoding`),
    dropout, post-norm `TransformerEncoder` / `TransformerDecoder` layers,
    no output bias. Its parameter count equals ours (a test checks it).
    """
    import math

    import keras
    import keras_hub
    from keras import ops

    if policy:
        keras.config.set_dtype_policy(policy)
    d, f, h, v, n = (CONFIG[k] for k in ("d_model", "d_ff", "heads", "vocab", "layers"))
    embedding = keras_hub.layers.ReversibleEmbedding(v, d, tie_weights=True, name="shared_embedding")
    positions = keras_hub.layers.SinePositionEncoding(name="positions")
    scale = math.sqrt(d)

    def embed(ids, name):
        x = embedding(ids) * scale
        return keras.layers.Dropout(CONFIG["dropout"], name=f"{name}_dropout")(x + positions(x))

    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    source_padding = ops.not_equal(source, PAD)
    x = embed(source, "source")
    for _ in range(n):
        x = keras_hub.layers.TransformerEncoder(f, h, dropout=CONFIG["dropout"])(x, padding_mask=source_padding)
    y = embed(target, "target")
    for _ in range(n):
        y = keras_hub.layers.TransformerDecoder(f, h, dropout=CONFIG["dropout"])(
            y, x, decoder_padding_mask=ops.not_equal(target, PAD), encoder_padding_mask=source_padding)
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(embedding(y, reverse=True))
    return keras.Model({"source": source, "target": target}, logits)


def compiled_keras_hub_tied(policy=None):
    """`build_keras_hub_tied` compiled with our loss and optimizer: only the layers differ from ours."""
    from keras_transformer.training import LabelSmoothedCrossEntropy, paper_optimizer

    model = build_keras_hub_tied(policy)
    model.compile(optimizer=paper_optimizer(CONFIG["d_model"]), loss=LabelSmoothedCrossEntropy(0.1))
    return model


def run_keras_hub_tied(batches, steps, warmup, policy=None):
    return timed_fit(compiled_keras_hub_tied(policy), batches, steps, warmup), "tensorflow"


def run_torch(batches, steps, warmup):
    import math

    import torch

    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    d, f, h, v, n = (CONFIG[k] for k in ("d_model", "d_ff", "heads", "vocab", "layers"))

    class TorchTransformer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(v, d, padding_idx=0)
            self.core = torch.nn.Transformer(
                d, h, n, n, f, dropout=CONFIG["dropout"], batch_first=True
            )
            self.core.encoder.norm = None
            self.core.decoder.norm = None
            position = torch.arange(512).unsqueeze(1)
            div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
            table = torch.zeros(512, d)
            table[:, 0::2] = torch.sin(position * div)
            table[:, 1::2] = torch.cos(position * div)
            self.register_buffer("positions", table)
            self.dropout = torch.nn.Dropout(CONFIG["dropout"])

        def embed(self, ids):
            return self.dropout(self.embedding(ids) * math.sqrt(d) + self.positions[: ids.shape[1]])

        def forward(self, source, target):
            causal = torch.nn.Transformer.generate_square_subsequent_mask(target.shape[1])
            hidden = self.core(
                self.embed(source), self.embed(target), tgt_mask=causal,
                src_key_padding_mask=source == 0, memory_key_padding_mask=source == 0,
                tgt_is_causal=True,
            )
            return hidden @ self.embedding.weight.T

    model = TorchTransformer()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1)
    batches = [tuple(torch.from_numpy(a).long() for a in batch) for batch in batches]
    for step in range(warmup + steps):
        if step == warmup:
            start = time.perf_counter()
        source, target, labels = batches[step % len(batches)]
        logits = model(source, target)
        loss = loss_fn(logits.reshape(-1, v), labels.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start, "torch"


OPENNMT_MODEL = """
import opennmt

def model():
    return opennmt.models.Transformer(
        num_layers={layers}, num_units={d_model}, num_heads={heads}, ffn_inner_dim={d_ff},
        dropout={dropout}, attention_dropout=0.0, ffn_dropout=0.0,
        share_embeddings=opennmt.models.EmbeddingsSharingLevel.ALL, pre_norm=False,
    )
"""


def run_opennmt(batches, steps, warmup, python, real, prelude=""):
    """OpenNMT-tf's own trainer on the same sentences, written as whitespace tokens.

    Synthetic workload: one fixed-size batch per batch of ours (no
    bucketing, no shuffling). Real workload: the same sentences, batched by
    OpenNMT-tf itself (tokens, at the same budget, its own length buckets).
    `prelude`: Python run in OpenNMT-tf's process before its trainer starts
    (train_profile.py starts a profiler there).
    """
    import re

    work = Path(tempfile.mkdtemp(prefix="onmt-"))
    vocab = work / "vocab.txt"
    # OpenNMT reserves ids 0-2 for the first three lines of the file and
    # appends <unk>: <blank> <s> </s> w4 ... w{V-1} <unk> is a V-id vocabulary,
    # like ours (pad, unk, bos, eos, 4 ... V-1).
    specials = "<blank>\n<s>\n</s>\n"
    vocab.write_text(specials + "".join(f"w{i}\n" for i in range(4, CONFIG["vocab"])))
    longest = 0
    with open(work / "src.txt", "w") as src, open(work / "tgt.txt", "w") as tgt:
        for source, _, labels in batches:
            for source_row, label_row in zip(source, labels):
                source_ids = [i for i in source_row if i not in (PAD, BOS, EOS)]
                # OpenNMT-tf appends its own </s>: the last label (EOS, or the
                # 32nd synthetic token) is left out, so both count as many target tokens.
                label_ids = [i for i in label_row if i != PAD][:-1]
                longest = max(longest, len(source_ids), len(label_ids))
                src.write(" ".join(f"w{i}" for i in source_ids) + "\n")
                tgt.write(" ".join(f"w{i}" for i in label_ids) + "\n")
    (work / "model.py").write_text(OPENNMT_MODEL.format(**CONFIG))
    total = warmup + steps
    (work / "config.yml").write_text(
        f"""model_dir: {work}/run
data:
  train_features_file: {work}/src.txt
  train_labels_file: {work}/tgt.txt
  source_vocabulary: {vocab}
  target_vocabulary: {vocab}
params:
  optimizer: Adam
  optimizer_params: {{beta_1: 0.9, beta_2: 0.98, epsilon: 1.0e-9}}
  learning_rate: 1.0e-4
  label_smoothing: 0.1
train:
  batch_size: {REAL_TOKENS_PER_BATCH if real else BATCH}
  batch_type: {"tokens" if real else "examples"}
  effective_batch_size: null
  max_step: {total}
  save_checkpoints_steps: {total * 10}
  save_summary_steps: {warmup}
  sample_buffer_size: 0
  length_bucket_width: {1 if real else 0}
  maximum_features_length: {longest + 2}
  maximum_labels_length: {longest + 2}
"""
    )
    command = [
        python, "-c",
        prelude + "\nimport sys; from opennmt.bin.main import main; sys.argv=sys.argv[1:]\n"
        + inspect.getsource(peak_memory_mb)
        + "\ntry: main()\nfinally: print('PEAK_MB', peak_memory_mb())",
        "onmt-main", "--model", str(work / "model.py"), "--config", str(work / "config.yml"),
        "--auto_config", "train",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1", PYTHONPATH="")
    output = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
    log = output.stdout + output.stderr
    peak = re.findall(r"PEAK_MB ([\d.]+)", log)
    intervals = opennmt_intervals(log)
    if not intervals:
        raise RuntimeError("OpenNMT-tf produced no throughput lines:\n" + log[-3000:])
    return {**opennmt_rate(intervals), "peak_mb": float(peak[0]) if peak else float("nan"), "intervals": intervals}


def opennmt_rate(intervals):
    """Target tokens/s over OpenNMT-tf's logged intervals, the first left out.

    The first interval holds the tracing (our contenders' warm-up). The rate
    is the total of target tokens over the total time of the others, not the
    mean of their rates (which would weigh a short interval like a long one).
    """
    timed = intervals[1:] or intervals
    seconds = sum(interval_seconds for _, interval_seconds, _ in timed)
    tokens = sum(interval_tokens for _, _, interval_tokens in timed)
    return {"tokens_per_s": tokens / seconds, "seconds": seconds, "target_tokens": tokens,
            "steps": sum(steps for steps, _, _ in timed)}


def opennmt_intervals(log):
    """(steps, seconds, target tokens) of each summary interval of an OpenNMT-tf 2.x training log.

    OpenNMT-tf 2.32 logs, every `save_summary_steps` steps, "Step = N ;
    steps/s = R, tokens/s = T (S source, U target) ; ...": the steps since the
    previous line over R (rounded to hundredths: under 0.5% off at 1 step/s
    or more) give the interval's seconds, and U times those its target tokens.
    """
    import re

    pattern = re.compile(r"Step = (\d+) ; steps/s = ([\d.]+),.*?tokens/s = [\d.]+ \([\d.]+ source, ([\d.]+) target\)")
    intervals, previous = [], 0
    for step, steps_per_s, target_rate in pattern.findall(log):
        step, steps_per_s, target_rate = int(step), float(steps_per_s), float(target_rate)
        if steps_per_s <= 0:
            continue
        seconds = (step - previous) / steps_per_s
        intervals.append((step - previous, seconds, target_rate * seconds))
        previous = step
    return intervals


def matmul_peak_flops(size=4096, repeats=5, dtype="float32"):
    import tensorflow as tf

    a = tf.cast(tf.random.normal((size, size)), dtype)
    b = tf.cast(tf.random.normal((size, size)), dtype)
    tf.matmul(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        tf.matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


CONTENDERS = {
    "ours-tf": ("tensorflow", lambda b, a: run_ours(b, a.steps, a.warmup, jit_compile=False)),
    "ours-tf-xla": ("tensorflow", lambda b, a: run_ours(b, a.steps, a.warmup, jit_compile=True)),
    "ours-jax": ("jax", lambda b, a: run_ours(b, a.steps, a.warmup, jit_compile=True)),
    "keras-hub": ("tensorflow", lambda b, a: run_keras_hub(b, a.steps, a.warmup)),
    "keras-hub-tied": ("tensorflow", lambda b, a: run_keras_hub_tied(b, a.steps, a.warmup)),
    # Mixed precision (bfloat16 matmuls, float32 weights and loss): AMX/AVX512-BF16
    # CPUs run bfloat16 matmuls ~2x faster. Same model, other numerics, so these
    # rows are compared with each other and with the bfloat16 matmul peak.
    "ours-tf-bf16": ("tensorflow", lambda b, a: run_ours(b, a.steps, a.warmup, jit_compile=False,
                                                         policy="mixed_bfloat16")),
    "keras-hub-bf16": ("tensorflow", lambda b, a: run_keras_hub(b, a.steps, a.warmup, policy="mixed_bfloat16")),
    "keras-hub-tied-bf16": ("tensorflow", lambda b, a: run_keras_hub_tied(b, a.steps, a.warmup,
                                                                          policy="mixed_bfloat16")),
    "torch.nn.Transformer": ("torch", lambda b, a: run_torch(b, a.steps, a.warmup)),
}


# What each row is, printed under the table and kept in the record.
LABELS = {
    "ours-tf": "ours, TensorFlow, plain graph",
    "ours-tf-xla": "ours, TensorFlow, XLA",
    "ours-jax": "ours, JAX (jit)",
    "keras-hub": "KerasHub layers, keras-io architecture (untied Dense output, learned positions; ~11.9M "
                 "parameters), stock Adam, no label smoothing",
    "keras-hub-tied": "KerasHub layers at our exact size (one tied ReversibleEmbedding, sinusoidal positions; "
                      "our parameter count), our loss and paper_optimizer: like for like",
    "ours-tf-bf16": "ours, mixed_bfloat16, plain graph",
    "keras-hub-bf16": "keras-io architecture, mixed_bfloat16",
    "keras-hub-tied-bf16": "KerasHub layers at our exact size, mixed_bfloat16",
    "torch.nn.Transformer": "torch.nn.Transformer with a tied embedding, eager",
    "opennmt-tf": "OpenNMT-tf 2.32 onmt-main (its own trainer; real text: its own batching)",
}


def worker(args):
    """Runs one contender in this process and prints one JSON line."""
    batches = load_batches(args.workload, args.data_dir, args.work_dir, args.bucket_width)
    seconds, backend = CONTENDERS[args.worker][1](batches, args)
    counts = target_tokens(batches)
    tokens = sum(counts[step % len(batches)] for step in range(args.warmup, args.warmup + args.steps))
    print("RESULT " + json.dumps({
        "name": args.worker, "backend": backend, "tokens_per_s": tokens / seconds,
        "steps_per_s": args.steps / seconds, "peak_mb": peak_memory_mb(),
        "seconds": seconds, "target_tokens": tokens, "steps": args.steps,
    }))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=("synthetic", "real"), default="synthetic",
                        help="fixed-shape random batches, or token-bucketed real text (module docstring)")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"),
                        help="where the real workload's corpora are (default ../shared/data)")
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "throughput"),
                        help="where the real workload's batches are cached (batches_width*.npz; delete to rebuild)")
    parser.add_argument("--bucket-width", type=int, default=1,
                        help="real workload: batch lengths are padded to multiples of this (default 1)")
    parser.add_argument("--steps", type=int, help="timed training steps per contender "
                        "(default 30; real workload: two passes over its batches)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (tracing, compiling; "
                        "default 5; real workload: one pass over its batches)")
    parser.add_argument("--only", nargs="*", help="contenders to run (default: all)")
    parser.add_argument("--opennmt-python", default=str(ROOT / ".venv-opennmt" / "bin" / "python"))
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the contenders this many times, taking turns; report medians")
    parser.add_argument("--record", default=_records.default_path("train_throughput"),
                        help="JSON-lines file the run's record (machine, load, commit, command, every round's "
                             "seconds and tokens) is appended to (default %(default)s; '' for none)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    if args.bucket_width < 1:
        parser.error(f"--bucket-width must be at least 1 (got {args.bucket_width})")
    real = args.workload == "real"
    batches = load_batches(args.workload, args.data_dir, args.work_dir, args.bucket_width)  # the real workload is built (and cached) once, here
    if args.steps is None:
        args.steps = 2 * len(batches) if real else 30
    if args.warmup is None:
        args.warmup = len(batches) if real else 5
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1 (got {args.rounds})")
    names = args.only or list(CONTENDERS) + ["opennmt-tf"]
    unknown = sorted(set(names) - set(CONTENDERS) - {"opennmt-tf"})
    if unknown:
        parser.error(f"--only: unknown contender(s) {', '.join(unknown)}; choose from "
                     f"{', '.join(list(CONTENDERS) + ['opennmt-tf'])}")
    peak = matmul_peak_flops()
    peak_bf16 = matmul_peak_flops(dtype="bfloat16") if any(n.endswith("-bf16") for n in names) else None
    cycle_flops, cycle_tokens = cycle_flops_and_tokens(batches)
    flops_per_token = cycle_flops / cycle_tokens
    def run_contender(name):
        """One timed run of `name` in its own process; None if it is not installed."""
        if name == "opennmt-tf":
            if not Path(args.opennmt_python).exists():
                print(f"  skipped: {args.opennmt_python} not found", file=sys.stderr)
                return None
            return {"name": name, "backend": "tensorflow 2.13",
                    **run_opennmt(batches, args.steps, args.warmup, args.opennmt_python, real)}
        backend = CONTENDERS[name][0]
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
        command = [sys.executable, __file__, "--worker", name, "--workload", args.workload,
                   "--data-dir", args.data_dir, "--work-dir", args.work_dir,
                   "--bucket-width", str(args.bucket_width),
                   "--steps", str(args.steps), "--warmup", str(args.warmup)]
        output = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
        line = [l for l in output.stdout.splitlines() if l.startswith("RESULT ")]
        if output.returncode or not line:
            print(output.stdout[-2000:] + output.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"contender {name} failed")
        return json.loads(line[-1][len("RESULT "):])

    # Contenders take turns, round after round: this VM's speed drifts by tens
    # of percent over minutes, and a ratio taken within one round (minutes
    # apart) is steadier than one between runs far apart.
    record = _records.start("train_throughput")
    rounds = []
    for index in range(args.rounds):
        current = {}
        for name in names:
            print(f"round {index + 1}/{args.rounds}: running {name} ...", file=sys.stderr, flush=True)
            result = run_contender(name)
            if result is not None:
                current[name] = result
        rounds.append(current)
    # After the contenders: the floor's operands (gigabytes for the real
    # workload) would otherwise raise this process's peak RSS, which Linux
    # hands on to every child it starts.
    floor_rate = cycle_tokens / matmul_floor_seconds(batches)
    reference = "ours-tf" if "ours-tf" in rounds[0] else next(iter(rounds[0]))
    results = []
    for name, first in rounds[0].items():
        rates = [r[name]["tokens_per_s"] for r in rounds]
        ratios = [r[name]["tokens_per_s"] / r[reference]["tokens_per_s"] for r in rounds]
        results.append({"name": name, "backend": first["backend"], "tokens_per_s": statistics.median(rates),
                        "vs_reference": statistics.median(ratios), "vs_reference_range": [min(ratios), max(ratios)],
                        "peak_mb": max(r[name]["peak_mb"] for r in rounds), "tokens_per_s_by_round": rates,
                        "label": LABELS.get(name, name)})

    spread = args.rounds > 1
    rounds_note = f", {args.rounds} rounds (medians; vs {reference}: median and range of same-round ratios)"
    print(f"\nworkload: {args.workload}{f' ({args.bucket_width}-token buckets)' if real else ''}, {len(batches)} batches, {cycle_tokens / len(batches):.0f} non-pad "
          f"target tokens per batch on average; {args.warmup} warm-up and {args.steps} timed steps"
          + (rounds_note if spread else ""))
    print(f"matmul peak (4096x4096 float32 tf.matmul): {peak / 1e9:.0f} GFLOP/s; "
          f"{flops_per_token / 1e6:.1f} MFLOP per non-pad target token (training, matmuls only"
          f"{', padding included' if real else ''})")
    if peak_bf16:
        print(f"bfloat16 matmul peak (same matmul in bfloat16): {peak_bf16 / 1e9:.0f} GFLOP/s; "
              f"-bf16 rows' share is of that peak")
    print(f"matmul floor (the step's own float32 matrix products alone, overlapped, nothing else): "
          f"{floor_rate:.0f} tokens/s; '% floor' is each float32 contender's rate against it")
    print(f"{'contender':<22}{'backend':<16}{'tokens/s':>10}{' vs ' + reference:>20}"
          + (f"{'range':>13}" if spread else "") + f"{'peak MB':>10}{'% matmul peak':>15}{'% floor':>9}")
    # On real text OpenNMT-tf batches the sentences itself, while the floor
    # (and the FLOPs per token) come from our batches: its shares are marked.
    ours_batches_only = {"opennmt-tf"} if real else set()
    for r in results:
        bfloat16 = r["name"].endswith("-bf16")  # other arithmetic: its own peak, no float32 floor
        share = 100 * r["tokens_per_s"] * flops_per_token / (peak_bf16 if bfloat16 else peak)
        low, high = r["vs_reference_range"]
        mark = "*" if r["name"] in ours_batches_only else " "
        print(f"{r['name']:<22}{r['backend']:<16}{r['tokens_per_s']:>10.0f}{r['vs_reference']:>20.2f}"
              + (f"{f'{low:.2f}-{high:.2f}':>13}" if spread else "")
              + f"{r['peak_mb']:>10.0f}{share:>13.0f}%{mark}"
              + (f"{'-':>9}" if bfloat16 else f"{100 * r['tokens_per_s'] / floor_rate:>7.0f}%{mark}"))
    if ours_batches_only & {r["name"] for r in results}:
        print("* computed from OUR batches' FLOPs per token and matmul floor; OpenNMT-tf trained on its own "
              "batches of the same sentences (less padding), so this share is an estimate")
    for r in results:
        print(f"  {r['name']}: {r['label']}")
    record.update({
        "workload": {"kind": args.workload, "bucket_width": args.bucket_width if real else None,
                     "batches": len(batches), "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds,
                     "config": CONFIG, "target_tokens_per_batch": cycle_tokens / len(batches)},
        "reference": reference, "matmul_peak_flops": peak, "bfloat16_matmul_peak_flops": peak_bf16,
        "flops_per_target_token": flops_per_token, "matmul_floor_tokens_per_s": floor_rate,
        "floor_from_our_batches": sorted(ours_batches_only & {r["name"] for r in results}),
        "labels": {r["name"]: r["label"] for r in results},
        # Every contender's raw figures, round by round (OpenNMT-tf's with its logged intervals).
        "rounds": rounds, "results": results,
    })
    _records.finish(record)
    if args.record:
        _records.append(args.record, record)
        print(f"record appended to {os.path.relpath(args.record, ROOT)}")


if __name__ == "__main__":
    main()
