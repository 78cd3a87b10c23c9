"""OpenNMT-tf 2.32 as a benchmark contender: its own trainer and decoder, in its own process and virtual
environment (`INSTALL`), with _workloads.Contender's verbs: `train_steps` runs `onmt-main` on the batches'
sentences (train_throughput.py), `quality_command` starts the worker _quality_opennmt.py (quality.py).
How: docs/benchmarks.md, "The shared harness"."""

import inspect
import os
import subprocess
import tempfile
from pathlib import Path

from benchmarks._workloads import BATCH, BOS, EOS, PAD, REAL_TOKENS_PER_BATCH, SIZE, Contender, peak_memory_mb

HERE = Path(__file__).resolve().parent
INSTALL = ('python3.11 -m venv .venv-opennmt && .venv-opennmt/bin/pip install "tensorflow==2.13.1" '
           '"opennmt-tf==2.32.0"')


class OpenNMT(Contender):
    name = "opennmt-tf"
    label = "OpenNMT-tf 2.32 onmt-main (its own trainer; real text: its own batching)"
    backend = "tensorflow 2.13"

    def __init__(self, python):
        self.python = python

    def available(self):
        return Path(self.python).exists()

    def train_steps(self, model, batches, steps, warmup, real=False):
        """`model` is None (OpenNMT-tf builds its own in its process); see `run_opennmt`."""
        return run_opennmt(batches, steps, warmup, self.python, real)

    def quality_command(self, data_dir, out_dir, minutes, seed, settings, config):
        """The command line of the quality worker (train to `minutes`, then decode the test split)."""
        import json

        return [self.python, str(HERE / "_quality_opennmt.py"), "--data-dir", str(data_dir), "--out-dir",
                str(out_dir), "--minutes", str(minutes), "--seed", str(seed),
                "--settings-json", json.dumps(settings), "--model-json", json.dumps(config)]


OPENNMT_MODEL = """
import opennmt

def model():
    return opennmt.models.Transformer(
        num_layers={layers}, num_units={d_model}, num_heads={heads}, ffn_inner_dim={d_ff},
        dropout={dropout}, attention_dropout=0.0, ffn_dropout=0.0,
        share_embeddings=opennmt.models.EmbeddingsSharingLevel.ALL, pre_norm=False,
    )
"""


def run_opennmt(batches, steps, warmup, python, real, size=SIZE):
    """OpenNMT-tf's own trainer on the same sentences as whitespace tokens: synthetic, one fixed-size batch per
    batch of ours; real text, batched by OpenNMT-tf itself (tokens, the same budget, its own length buckets)."""
    import re

    work = Path(tempfile.mkdtemp(prefix="onmt-"))
    vocab = work / "vocab.txt"
    # OpenNMT reserves ids 0-2 for the first three lines of the file and
    # appends <unk>: <blank> <s> </s> w4 ... w{V-1} <unk> is a V-id vocabulary,
    # like ours (pad, unk, bos, eos, 4 ... V-1).
    specials = "<blank>\n<s>\n</s>\n"
    vocab.write_text(specials + "".join(f"w{i}\n" for i in range(4, size["vocab"])))
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
    (work / "model.py").write_text(OPENNMT_MODEL.format(**size))
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
        "import sys; from opennmt.bin.main import main; sys.argv=sys.argv[1:]\n"
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
    """Target tokens/s over OpenNMT-tf's logged intervals but the first (the tracing: our warm-up): total
    tokens over total time, not the mean of the rates (which would weigh a short interval like a long one)."""
    timed = intervals[1:] or intervals
    seconds = sum(interval_seconds for _, interval_seconds, _ in timed)
    tokens = sum(interval_tokens for _, _, interval_tokens in timed)
    return {"tokens_per_s": tokens / seconds, "seconds": seconds, "target_tokens": tokens,
            "steps": sum(steps for steps, _, _ in timed)}


def opennmt_intervals(log):
    """(steps, seconds, target tokens) of each interval of an OpenNMT-tf 2.32 log's "Step = N ; steps/s = R,
    tokens/s = T (S source, U target)" lines: the steps since the last line over R (hundredths: under 0.5% off at
    1 step/s or more) give its seconds, and U times those its target tokens."""
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
