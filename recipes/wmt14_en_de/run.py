"""The paper's WMT 2014 English->German setups: train, average, evaluate.

    python recipes/wmt14_en_de/prepare.py tfds --out runs/wmt14_en_de
    python recipes/wmt14_en_de/run.py --config recipes/wmt14_en_de/base.yaml [--gpu-tokens 6250]

`--gpu-tokens N` is what one GPU holds per step: the global batch becomes N x
GPUs tokens and gradients are accumulated over enough steps to reach the
paper's ~25,000 tokens per update (e.g. 2 GPUs x 6,250 tokens x 2 steps).
Training resumes from the newest checkpoint when run again. At the end the
last checkpoints are averaged (5 base, 20 big) and newstest2014 is decoded
with beam 4 and length penalty 0.6 and scored with sacreBLEU.
"""

import argparse
import math
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's C++ log lines stay hidden unless asked for (--verbose, or
# TF_CPP_MIN_LOG_LEVEL set by the user); this must happen before TensorFlow loads.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if "--verbose" in sys.argv[1:] else "3")

PAPER_TOKENS_PER_UPDATE = 25000


def accumulation_plan(gpu_tokens, replicas, target=PAPER_TOKENS_PER_UPDATE):
    """(tokens_per_batch, gradient_accumulation_steps) reaching ~target tokens per update."""
    per_step = gpu_tokens * max(1, replicas)
    steps = max(1, math.ceil(target / per_step))
    return per_step, (steps if steps > 1 else None)


def main(argv=None, *, description=__doc__, paper_bleu="27.3 base / 28.4 big"):
    """The recipe's command line; the English-French recipe runs it with its own text."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's C++ log lines (hidden by default)")
    parser.add_argument("--config", required=True, help="base.yaml or big.yaml")
    parser.add_argument("--gpu-tokens", type=int, help="tokens one GPU holds per step")
    parser.add_argument("--set", action="append", default=[], dest="assignments", metavar="KEY=VALUE")
    parser.add_argument("--skip-training", action="store_true", help="only evaluate an existing run")
    args = parser.parse_args(argv)

    from keras_transformer import config as config_lib
    from keras_transformer.run import train as run_train, trained as run_trained

    assignments = list(args.assignments)
    if args.gpu_tokens:
        import tensorflow as tf

        replicas = len(tf.config.list_physical_devices("GPU")) or 1
        tokens, accumulation = accumulation_plan(args.gpu_tokens, replicas)
        assignments = [f"training.tokens_per_batch={tokens}",
                       f"training.gradient_accumulation_steps={accumulation}"] + assignments
        print(f"{replicas} replica(s) x {args.gpu_tokens} tokens, accumulating {accumulation or 1} "
              f"step(s): ~{tokens * (accumulation or 1)} tokens per update")
    config = config_lib.resolve([args.config], assignments=assignments)
    if not args.skip_training:
        run_train.train(config)
    result, samples = run_trained.evaluate(config["output_dir"])
    for source, hypothesis, reference in samples[:3]:
        print(f"SRC {source}\nHYP {hypothesis}\nREF {reference}\n")
    print(f"newstest2014 ({result['sentences']} sentences): sacreBLEU {result['bleu']:.2f} "
          f"({result['bleu_signature']}), chrF {result['chrf']:.2f}")
    if "bleu_tokenized" in result:
        print(f"tokenized BLEU (closer to the paper's {paper_bleu}, not comparable with "
              f"sacreBLEU): {result['bleu_tokenized']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
