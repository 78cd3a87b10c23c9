"""The OpenNMT-tf worker of benchmarks/quality.py, run with .venv-opennmt's Python (OpenNMT-tf 2.32 needs
TensorFlow 2.13): trains with OpenNMT-tf's Runner to a wall-clock budget on DATA_DIR/{train.src, train.tgt,
vocab.txt} (written by quality.py), decodes test.src with ours' length cap, and writes OUT_DIR/train.json and
predictions.txt. How: docs/benchmarks.md, "The shared harness"."""

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import opennmt  # noqa: E402
from opennmt import training as training_util  # noqa: E402


def count_parameters(model_dir):
    """Model weights in the latest checkpoint (optimizer slots and counters excluded)."""
    return sum(math.prod(shape) for name, shape in tf.train.list_variables(tf.train.latest_checkpoint(model_dir))
               if name.startswith("model/") and "OPTIMIZER_SLOT" not in name and shape)


def cap_per_batch(max_extra_length):
    """Decodes each batch with at most (longest source + 1 + max_extra_length) steps, EOS's included."""
    from opennmt.models.sequence_to_sequence import SequenceToSequence

    original = SequenceToSequence._dynamic_decode

    def capped(self, features, *args, **kwargs):
        fixed = self.params.get("maximum_decoding_length")
        self.params["maximum_decoding_length"] = tf.reduce_max(features["length"]) + 1 + max_extra_length
        try:
            return original(self, features, *args, **kwargs)
        finally:
            self.params["maximum_decoding_length"] = fixed

    SequenceToSequence._dynamic_decode = capped


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--settings-json", required=True)
    parser.add_argument("--model-json", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    settings, size = json.loads(args.settings_json), json.loads(args.model_json)
    data, out = args.data_dir, args.out_dir

    def make_model():
        return opennmt.models.Transformer(
            num_layers=size["num_layers"], num_units=size["d_model"], num_heads=size["num_heads"],
            ffn_inner_dim=size["d_ff"], dropout=size["dropout"], attention_dropout=0.0, ffn_dropout=0.0,
            share_embeddings=opennmt.models.EmbeddingsSharingLevel.ALL, pre_norm=settings["norm_first"],
        )

    max_tokens = size["max_length"] - 1  # ours counts EOS (source, labels) or BOS (decoder input)
    config = {
        "model_dir": os.path.join(out, "run"),
        "data": {
            "train_features_file": os.path.join(data, "train.src"),
            "train_labels_file": os.path.join(data, "train.tgt"),
            "source_vocabulary": os.path.join(data, "vocab.txt"),
            "target_vocabulary": os.path.join(data, "vocab.txt"),
        },
        "params": {
            "optimizer": "Adam",
            "optimizer_params": {"beta_1": 0.9, "beta_2": 0.98, "epsilon": 1e-9},
            "learning_rate": settings["learning_rate_scale"],
            "decay_type": "NoamDecay",
            "decay_params": {"model_dim": size["d_model"], "warmup_steps": settings["warmup_steps"]},
            "label_smoothing": 0.1,
            "beam_width": 4,
            "length_penalty": 0.6,
            # An upper bound only: cap_per_batch sets each batch's own cap.
            "maximum_decoding_length": size["max_length"] + size["max_extra_length"],
        },
        "train": {
            "batch_type": "tokens",
            "batch_size": settings["tokens_per_batch"],
            "effective_batch_size": None,
            "max_step": 10**8,
            "save_checkpoints_steps": size["save_every_steps"],
            "keep_checkpoint_max": 2,
            "average_last_checkpoints": 0,
            "maximum_features_length": max_tokens,
            "maximum_labels_length": max_tokens,
            "save_summary_steps": 100,
        },
        # Width 1: every batch holds sources of one length, so its cap (below) is each sentence's.
        "infer": {"batch_type": "examples", "batch_size": size["decode_batch"], "length_bucket_width": 1},
    }

    clock = {"steps": 0}
    original_steps = training_util.Trainer._steps

    def steps_within_budget(self, dataset, accum_steps=1):
        clock["started"] = clock["ended"] = time.monotonic()
        deadline = clock["started"] + 60 * args.minutes
        for loss in original_steps(self, dataset, accum_steps=accum_steps):
            yield loss
            clock["steps"] += 1
            clock["ended"] = time.monotonic()
            if clock["ended"] > deadline:
                return

    training_util.Trainer._steps = steps_within_budget

    # Tokens actually trained on, as ours are counted: target tokens with EOS
    # (OpenNMT-tf's labels "length"). Counted inside its traced step.
    target_tokens = tf.Variable(0, dtype=tf.int64, trainable=False)
    original_accumulate = training_util.Trainer._accumulate_gradients

    def accumulate_and_count(self, batch):
        original_accumulate(self, batch)
        _, labels = self._model.split_features_labels(batch)
        target_tokens.assign_add(tf.reduce_sum(tf.cast(labels["length"], tf.int64)))

    training_util.Trainer._accumulate_gradients = accumulate_and_count
    tf.get_logger().setLevel("INFO")  # as onmt-main: its step, loss and checkpoint lines
    runner = opennmt.Runner(make_model, config, auto_config=True, seed=args.seed)
    _, summary = runner.train(return_summary=True)
    train_seconds = clock["ended"] - clock["started"]
    print(f"trained {summary['last_step']} steps in {train_seconds / 60:.2f} min, "
          f"last loss {summary['last_loss']:.3f}", flush=True)

    cap_per_batch(size["max_extra_length"])
    start = time.time()
    runner.infer(os.path.join(data, "test.src"), predictions_file=os.path.join(out, "predictions.txt"))
    decode_seconds = time.time() - start
    result = {
        "steps": int(summary["last_step"]), "train_seconds": train_seconds, "decode_seconds": decode_seconds,
        "target_tokens": int(target_tokens.numpy()),
        "search": f"OpenNMT-tf beam 4, length penalty 0.6, cap source + {size['max_extra_length']}",
        "settings": {"optimizer_used": "Adam(0.9, 0.98, 1e-9), NoamDecay", "loss": "label smoothing 0.1",
                     "checkpoint_every_steps": size["save_every_steps"],
                     "parameters": count_parameters(config["model_dir"]),
                     "reported_last_loss": float(summary["last_loss"])},
        "versions": {"tensorflow": tf.__version__, "opennmt-tf": opennmt.__version__},
    }
    with open(os.path.join(out, "train.json"), "w") as stream:
        json.dump(result, stream, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
