"""OpenNMT-tf decoding worker for benchmarks/decode.py (runs in .venv-opennmt).

Not a benchmark by itself: decode.py starts it with the OpenNMT-tf virtual
environment's Python (TensorFlow 2.13 + opennmt-tf 2.32 cannot share a
process with our TensorFlow) and drives it over stdin/stdout, one JSON object
per line, so that its runs interleave with the other contenders' rounds.

Protocol:
- first stdin line: {"source": [[id, ...], ...] (our ids), "steps": N,
  "vocabulary_size": V, "beam_size": K, "length_penalty": A, "seed": S};
  the worker builds the model and answers `READY {"build_s": ...}`;
- then one command per line, "greedy" or "beam", answered by
  `RESULT {"wall_s", "cpu_s", "ids", "lengths"}` (wall and CPU seconds of this
  process for one decode of the whole batch, the first call of a kind
  including its tracing; ids of the best hypothesis mapped to ours by
  meaning) or `ERROR {"message": ...}`;
- "quit" (or end of input) ends it.

The model: `opennmt.models.Transformer` of the tiny size (d_model 256, 3+3
layers, 4 heads, d_ff 1024, post-norm, embeddings shared between source,
target and output), random weights from OpenNMT-tf's own initialisers, a
vocabulary of <blank>, <s>, </s>, V - 4 dummy words and <unk> (V ids, as
ours: OpenNMT reserves 0-2 for pad/BOS/EOS and puts <unk> last).
Our ids map to OpenNMT's as id - 1 (our EOS 3 becomes its </s> 2; words
4.. become 3..), so the source batch has the same shape and token pattern as
ours, trailing </s> included.

Decoding is OpenNMT-tf's own inference path: `model.infer` (encoder, then
`decoder.dynamic_decode` with `BeamSearch(length_penalty)` or `GreedySearch`
and `BestSampler`, ids mapped back to tokens by its lookup table), wrapped in
`tf.function` with an input signature exactly as its
`inference.predict_dataset` does (no XLA: OpenNMT-tf's `jit_compile` option
only applies to training), with `minimum_decoding_length` =
`maximum_decoding_length` = steps so that EOS is forbidden and exactly
`steps` tokens are generated. XLA is not an option: `model.infer` under
`tf.function(jit_compile=True)` fails to compile (its string lookup table),
and its `decoder.dynamic_decode` alone under XLA aborts the process
("Update dim size 1 greater than dynamic slice dimension: 0": the
self-attention caches grow by concatenation in a `tf.while_loop` with
unknown-length shape invariants).
"""

import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import opennmt  # noqa: E402


def reply(tag, payload):
    sys.stdout.write(f"{tag} {json.dumps(payload)}\n")
    sys.stdout.flush()


def build_model(vocabulary_size, work_dir):
    vocabulary = os.path.join(work_dir, "vocabulary.txt")
    words = [opennmt.PADDING_TOKEN, opennmt.START_OF_SENTENCE_TOKEN, opennmt.END_OF_SENTENCE_TOKEN]
    # One id is left for OpenNMT's out-of-vocabulary bucket (<unk>, the last id).
    words += [f"w{i}" for i in range(4, vocabulary_size)]
    with open(vocabulary, "w") as f:
        f.write("".join(w + "\n" for w in words))
    model = opennmt.models.Transformer(
        num_layers=3, num_units=256, num_heads=4, ffn_inner_dim=1024,
        dropout=0.1, attention_dropout=0.0, ffn_dropout=0.0,
        share_embeddings=opennmt.models.EmbeddingsSharingLevel.ALL, pre_norm=False,
    )
    model.initialize(
        {"source_vocabulary": vocabulary, "target_vocabulary": vocabulary},
        params={"beam_width": 1},
    )
    model.create_variables()
    if model.labels_inputter.vocabulary_size != vocabulary_size:
        raise RuntimeError(
            f"OpenNMT-tf vocabulary has {model.labels_inputter.vocabulary_size} ids, expected {vocabulary_size}"
        )
    return model


def token_to_our_id(vocabulary_size):
    """OpenNMT-tf output token -> our id of the same meaning (wN -> N, specials to ours)."""
    table = {"<blank>": 0, "<unk>": 1, "<s>": 2, "</s>": 3}
    table.update({f"w{i}": i for i in range(4, vocabulary_size)})
    return np.vectorize(lambda token: table[token.decode()], otypes=[np.int64])


def main():
    config = json.loads(sys.stdin.readline())
    tf.random.set_seed(config.get("seed", 0))
    start = time.perf_counter()
    vocabulary_size = config["vocabulary_size"]
    steps = config["steps"]
    with tempfile.TemporaryDirectory(prefix="onmt-decode-") as work_dir:
        model = build_model(vocabulary_size, work_dir)  # its lookup tables read the file now
    to_ours = token_to_our_id(vocabulary_size)

    source = np.asarray(config["source"], dtype=np.int64) - 1
    features = {
        "ids": tf.constant(source),
        "length": tf.constant(np.count_nonzero(source, axis=1).astype(np.int32)),
    }
    signature = ({name: tf.TensorSpec.from_tensor(t) for name, t in features.items()},)
    functions = {}

    def infer_function(kind):
        """Traces model.infer with the decoding parameters of `kind` (read at trace time)."""
        if kind not in functions:
            if kind not in ("greedy", "beam"):
                raise ValueError(f"unknown command {kind!r}: expected greedy, beam or quit")
            beam = kind == "beam"
            model.params.update(
                beam_width=config["beam_size"] if beam else 1,
                length_penalty=config["length_penalty"] if beam else 0,
                minimum_decoding_length=steps,
                maximum_decoding_length=steps,
            )
            function = tf.function(model.infer, input_signature=signature)
            functions[kind] = function.get_concrete_function()
        return functions[kind]

    reply("READY", {"build_s": time.perf_counter() - start, "tensorflow": tf.__version__,
                    "opennmt": opennmt.__version__})
    for line in sys.stdin:
        kind = line.strip()
        if kind in ("", "quit"):
            break
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            predictions = infer_function(kind)(features)
            # As predict_dataset does: fetch every output to numpy.
            predictions = tf.nest.map_structure(lambda t: t.numpy(), predictions)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            tokens = predictions["tokens"][:, 0]  # best hypothesis
            lengths = predictions["length"][:, 0]
            reply("RESULT", {"wall_s": wall, "cpu_s": cpu, "ids": to_ours(tokens).tolist(),
                             "lengths": lengths.tolist()})
        except Exception as error:  # reported to the parent, which decides
            reply("ERROR", {"message": f"{type(error).__name__}: {str(error)[:2000]}"})


if __name__ == "__main__":
    main()
