"""Training throughput: keras_transformer against the alternatives, in one run.

Every contender trains the same architecture (the "tiny" configuration:
d_model 256, 3+3 layers, 4 heads, d_ff 1024, shared 8k vocabulary, post-LN,
dropout 0.1, Adam) on the same batches: 64 pairs of 32 source and 32 target
tokens, none of them padding. Each runs in its own process (a Keras backend
is chosen at import; OpenNMT-tf needs its own TensorFlow), warms up, then
times a fixed number of steps. Reported: non-pad target tokens per second,
the ratio to ours, the process's peak resident memory, and achieved FLOP/s as
a share of this machine's float32 matrix-multiply peak (a 4096x4096
tf.matmul) measured in the same run.

    .venv/bin/python benchmarks/train_throughput.py            # all contenders
    .venv/bin/python benchmarks/train_throughput.py --only ours-tf keras-hub

OpenNMT-tf runs when `--opennmt-python` (default `.venv-opennmt/bin/python`)
exists: `python3.11 -m venv .venv-opennmt && .venv-opennmt/bin/pip install
"tensorflow==2.13.1" "opennmt-tf==2.32.0"`.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = dict(vocab=8000, d_model=256, layers=3, heads=4, d_ff=1024, dropout=0.1)
BATCH, LENGTH = 64, 32
NUM_BATCHES = 16  # distinct batches, cycled


def make_batches(seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    # Ids 4.. are ordinary tokens (0 pad, 1 unk, 2 bos, 3 eos).
    source = rng.integers(4, CONFIG["vocab"], size=(NUM_BATCHES, BATCH, LENGTH), dtype="int32")
    target = rng.integers(4, CONFIG["vocab"], size=(NUM_BATCHES, BATCH, LENGTH + 1), dtype="int32")
    target[:, :, 0] = 2
    return source, target[:, :, :-1], target[:, :, 1:]


def training_flops_per_batch():
    """Matrix-multiply FLOPs of one training step (forward + backward = 3x forward)."""
    d, f, v, n = CONFIG["d_model"], CONFIG["d_ff"], CONFIG["vocab"], CONFIG["layers"]
    s = t = LENGTH
    encoder = n * (2 * s * 4 * d * d + 2 * s * 2 * d * f + 2 * 2 * s * s * d)
    decoder = n * (
        2 * t * 4 * d * d + 2 * 2 * t * t * d  # self-attention
        + 2 * t * 2 * d * d + 2 * s * 2 * d * d + 2 * 2 * t * s * d  # cross-attention
        + 2 * t * 2 * d * f
    )
    projection = 2 * t * d * v
    return 3 * BATCH * (encoder + decoder + projection)


def peak_memory_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_fit(model, steps, warmup):
    """Runs model.fit over the cycled batches; returns seconds for the timed steps."""
    import keras
    import tensorflow as tf

    source, target_in, labels = make_batches()
    dataset = tf.data.Dataset.from_tensor_slices(
        ({"source": source, "target": target_in}, labels)
    ).repeat().prefetch(4)

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == warmup - 1:
                self.start = time.perf_counter()

        def on_train_end(self, logs=None):
            self.end = time.perf_counter()

    clock = Clock()
    model.fit(dataset, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[clock])
    return clock.end - clock.start


def run_ours(steps, warmup, jit_compile, policy=None):
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
    return timed_fit(model, steps, warmup), keras.backend.backend()


def run_keras_hub(steps, warmup, policy=None):
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
    return timed_fit(model, steps, warmup), "tensorflow"


def run_torch(steps, warmup):
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
    batches = [torch.from_numpy(a).long() for a in make_batches()]
    for step in range(warmup + steps):
        if step == warmup:
            start = time.perf_counter()
        i = step % NUM_BATCHES
        logits = model(batches[0][i], batches[1][i])
        loss = loss_fn(logits.reshape(-1, v), batches[2][i].reshape(-1))
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


def run_opennmt(steps, warmup, python):
    """OpenNMT-tf's own trainer on the same batches, written as whitespace tokens."""
    import re

    source, _, labels = make_batches()
    work = Path(tempfile.mkdtemp(prefix="onmt-"))
    vocab = work / "vocab.txt"
    # OpenNMT reserves ids 0-2 for the first three lines of the file and
    # appends <unk>: <blank> <s> </s> w4 ... w{V-1} <unk> is a V-id vocabulary,
    # like ours (pad, unk, bos, eos, 4 ... V-1).
    specials = "<blank>\n<s>\n</s>\n"
    vocab.write_text(specials + "".join(f"w{i}\n" for i in range(4, CONFIG["vocab"])))
    with open(work / "src.txt", "w") as src, open(work / "tgt.txt", "w") as tgt:
        for b in range(NUM_BATCHES):
            for row in range(BATCH):
                src.write(" ".join(f"w{i}" for i in source[b, row]) + "\n")
                tgt.write(" ".join(f"w{i}" for i in labels[b, row][:-1]) + "\n")
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
  batch_size: {BATCH}
  batch_type: examples
  effective_batch_size: null
  max_step: {total}
  save_checkpoints_steps: {total * 10}
  save_summary_steps: {warmup}
  sample_buffer_size: 0
  length_bucket_width: 0
  maximum_features_length: {LENGTH + 2}
  maximum_labels_length: {LENGTH + 2}
"""
    )
    command = [
        python, "-c",
        "import resource, sys; from opennmt.bin.main import main; sys.argv=sys.argv[1:];"
        "\ntry: main()\nfinally: print('PEAK_MB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)",
        "onmt-main", "--model", str(work / "model.py"), "--config", str(work / "config.yml"),
        "--auto_config", "train",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1", PYTHONPATH="")
    output = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
    log = output.stdout + output.stderr
    # OpenNMT-tf 2.32 logs "tokens/s = N (S source, T target)" per summary interval.
    rates = [float(m) for m in re.findall(r"tokens/s = [\d.]+ \([\d.]+ source, ([\d.]+) target\)", log)]
    peak = re.findall(r"PEAK_MB ([\d.]+)", log)
    if not rates:
        raise RuntimeError("OpenNMT-tf produced no throughput lines:\n" + log[-3000:])
    # Its log reports one rate per summary interval; drop the first (tracing).
    rate = sum(rates[1:]) / len(rates[1:]) if len(rates) > 1 else rates[0]
    return rate, float(peak[0]) if peak else float("nan")


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
    "ours-tf": ("tensorflow", lambda a: run_ours(a.steps, a.warmup, jit_compile=False)),
    "ours-tf-xla": ("tensorflow", lambda a: run_ours(a.steps, a.warmup, jit_compile=True)),
    "ours-jax": ("jax", lambda a: run_ours(a.steps, a.warmup, jit_compile=True)),
    "keras-hub": ("tensorflow", lambda a: run_keras_hub(a.steps, a.warmup)),
    # Mixed precision (bfloat16 matmuls, float32 weights and loss): AMX/AVX512-BF16
    # CPUs run bfloat16 matmuls ~2x faster. Same model, other numerics, so these
    # rows are compared with each other and with the bfloat16 matmul peak.
    "ours-tf-bf16": ("tensorflow", lambda a: run_ours(a.steps, a.warmup, jit_compile=False,
                                                      policy="mixed_bfloat16")),
    "keras-hub-bf16": ("tensorflow", lambda a: run_keras_hub(a.steps, a.warmup, policy="mixed_bfloat16")),
    "torch.nn.Transformer": ("torch", lambda a: run_torch(a.steps, a.warmup)),
}


def worker(args):
    """Runs one contender in this process and prints one JSON line."""
    seconds, backend = CONTENDERS[args.worker][1](args)
    tokens = args.steps * BATCH * LENGTH
    print("RESULT " + json.dumps({
        "name": args.worker, "backend": backend, "tokens_per_s": tokens / seconds,
        "steps_per_s": args.steps / seconds, "peak_mb": peak_memory_mb(),
    }))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help="timed training steps per contender")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (tracing, compiling)")
    parser.add_argument("--only", nargs="*", help="contenders to run (default: all)")
    parser.add_argument("--opennmt-python", default=str(ROOT / ".venv-opennmt" / "bin" / "python"))
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    names = args.only or list(CONTENDERS) + ["opennmt-tf"]
    peak = matmul_peak_flops()
    peak_bf16 = matmul_peak_flops(dtype="bfloat16") if any(n.endswith("-bf16") for n in names) else None
    flops_per_token = training_flops_per_batch() / (BATCH * LENGTH)
    results = []
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        if name == "opennmt-tf":
            if not Path(args.opennmt_python).exists():
                print(f"  skipped: {args.opennmt_python} not found", file=sys.stderr)
                continue
            rate, peak_mb = run_opennmt(args.steps, args.warmup, args.opennmt_python)
            results.append({"name": name, "backend": "tensorflow 2.13", "tokens_per_s": rate, "peak_mb": peak_mb})
            continue
        backend = CONTENDERS[name][0]
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
        command = [sys.executable, __file__, "--worker", name,
                   "--steps", str(args.steps), "--warmup", str(args.warmup)]
        output = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
        line = [l for l in output.stdout.splitlines() if l.startswith("RESULT ")]
        if output.returncode or not line:
            print(output.stdout[-2000:] + output.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"contender {name} failed")
        results.append(json.loads(line[-1][len("RESULT "):]))

    reference = next((r for r in results if r["name"] == "ours-tf"), results[0])
    print(f"\nmatmul peak (4096x4096 float32 tf.matmul): {peak / 1e9:.0f} GFLOP/s; "
          f"{flops_per_token / 1e6:.1f} MFLOP per target token (training, matmuls only)")
    if peak_bf16:
        print(f"bfloat16 matmul peak (same matmul in bfloat16): {peak_bf16 / 1e9:.0f} GFLOP/s; "
              f"-bf16 rows' share is of that peak")
    print(f"{'contender':<22}{'backend':<16}{'tokens/s':>10}{'vs ours-tf':>12}{'peak MB':>10}{'% matmul peak':>15}")
    for r in results:
        share = 100 * r["tokens_per_s"] * flops_per_token / (peak_bf16 if r["name"].endswith("-bf16") else peak)
        print(f"{r['name']:<22}{r['backend']:<16}{r['tokens_per_s']:>10.0f}"
              f"{r['tokens_per_s'] / reference['tokens_per_s']:>12.2f}{r['peak_mb']:>10.0f}{share:>14.0f}%")
    if args.json:
        Path(args.json).write_text(json.dumps({"matmul_peak_flops": peak, "bfloat16_matmul_peak_flops": peak_bf16,
                                               "results": results}, indent=2))


if __name__ == "__main__":
    main()
