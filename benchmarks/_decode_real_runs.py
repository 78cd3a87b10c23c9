"""decode_variants.py's workloads on a trained run: the row-steps spent on sentences already done
(`finished_rows`), and the A/B of dropping them between phases (`compaction`: the shipped
search with and without it). Both translate the run's test split as `Translator` batches it."""

import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def counting_loop(original, counts):
    """A stand-in for `phases._while_loop_in_phases` that also counts, per sentence, the steps
    run while it was not done; appends (steps run, counts) to `counts`."""
    from keras import ops

    def loop(cond, body, loop_state, decoder, buffer_length):
        step, beam = loop_state

        def counted_cond(step, packed, decoder_state):
            return cond(step, packed[0], decoder_state)

        def counted_body(step, packed, decoder_state):
            beam, live = packed
            live = live + ops.cast(ops.logical_not(beam.done), "int32")
            step, beam, decoder_state = body(step, beam, decoder_state)
            return step, (beam, live), decoder_state

        live = ops.zeros(ops.shape(beam.done), dtype="int32")
        step, (beam, live), decoder_state = original(counted_cond, counted_body, (step, (beam, live)), decoder,
                                                     buffer_length)
        counts.append((step, live))
        return step, beam, decoder_state

    return loop


def take_turns(names, run, rounds, sentences):
    """`rounds` rounds of `run(name)` for every name, the order reversed every
    other round; [{name: seconds}] per round, each round printed (sentences/s)."""
    timed = []
    for index in range(rounds):
        current = {}
        for name in (names if index % 2 == 0 else names[::-1]):
            start = time.perf_counter()
            run(name)
            current[name] = time.perf_counter() - start
        timed.append(current)
        print(f"round {index + 1}/{rounds}: " + ", ".join(
            f"{n} {sentences / current[n]:.2f} sent/s" for n in names), file=sys.stderr, flush=True)
    return timed


def phase_boundaries(buffer_length):
    from keras_transformer.decoding.phases import _phase_capacities

    return _phase_capacities(int(buffer_length))


def finished_rows(args, record):
    import numpy as np
    import tensorflow as tf

    from keras_transformer import runs
    from keras_transformer.decoding import Translator, beam_search, phases
    from keras_transformer.decoding.search import PHASE_CAPACITIES

    model, tokenizer, config = runs.load_run(args.finished_rows)
    decoding = config["decoding"]
    texts = [source for source, _ in runs._read_pairs(config, "test")]
    translator = Translator(model, tokenizer, beam_size=decoding["beam_size"], alpha=decoding["alpha"],
                            max_extra_length=decoding["max_extra_length"], batch_size=decoding["batch_size"])
    sources = translator.source_ids(texts)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    counts = []
    options = dict(beam_size=decoding["beam_size"], alpha=decoding["alpha"],
                   max_extra_length=decoding["max_extra_length"], compile=False)

    @tf.function(autograph=False, input_signature=[tf.TensorSpec((None, None), tf.int32)])
    def run(source_ids):
        original = phases._while_loop_in_phases
        phases._while_loop_in_phases = counting_loop(original, counts)
        try:
            beam_search(model, source_ids, **options)
        finally:
            phases._while_loop_in_phases = original
        return counts[-1]

    total = live_total = at_boundaries = 0
    batches = []
    for start in range(0, len(order), translator.batch_size):
        batch = translator._padded(order[start : start + translator.batch_size], sources, translator.width_multiple)
        steps, live = (np.asarray(t) for t in run(tf.constant(batch)))
        steps = int(steps)
        buffer_length = batch.shape[1] + decoding["max_extra_length"]
        boundaries = [c for c in phase_boundaries(buffer_length) if c < steps] + [steps]
        # Dropped at the first boundary at or after it is done, a sentence still costs the steps up to there.
        kept = [min(c for c in boundaries if c >= n) for n in live]
        total += steps * len(live)
        live_total += int(live.sum())
        at_boundaries += int(sum(kept))
        batches.append({"sentences": len(live), "width": int(batch.shape[1]), "steps": steps,
                        "live_steps": live.tolist()})
    record.update({
        "kind": "finished-rows",
        "workload": {"run": os.path.relpath(os.path.abspath(args.finished_rows), os.path.join(ROOT, "..")),
                     "split": "test", "sentences": len(texts), "model": config["model"]["preset"],
                     "batch_size": decoding["batch_size"], "beam_size": decoding["beam_size"],
                     "alpha": decoding["alpha"], "max_extra_length": decoding["max_extra_length"],
                     "phase_capacities": list(PHASE_CAPACITIES)},
        "row_steps": {"all": total, "before_done": live_total, "kept_when_dropped_at_phase_boundaries": at_boundaries},
        "batches": batches,
    })


def compaction(args, record):
    """The shipped beam search, which drops done sentences between phases on this path, against the same
    search with that switched off (`phases.compacts` patched to False while it is traced), on a trained
    run's test sentences in Translator's batches, plain graph, taking turns."""
    import numpy as np
    import tensorflow as tf

    from keras_transformer import runs
    from keras_transformer.decoding import Translator, beam_search, phases

    model, tokenizer, config = runs.load_run(args.compaction)
    decoding = config["decoding"]
    texts = [source for source, _ in runs._read_pairs(config, "test")][: args.sentences]
    translator = Translator(model, tokenizer, beam_size=decoding["beam_size"], alpha=decoding["alpha"],
                            max_extra_length=decoding["max_extra_length"], batch_size=decoding["batch_size"])
    sources = translator.source_ids(texts)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    batches = [tf.constant(translator._padded(order[start : start + translator.batch_size], sources,
                                              translator.width_multiple))
               for start in range(0, len(order), translator.batch_size)]
    options = dict(beam_size=decoding["beam_size"], alpha=decoding["alpha"],
                   max_extra_length=decoding["max_extra_length"])
    signature = [tf.TensorSpec((None, None), tf.int32)]
    functions = {
        name: tf.function(lambda ids: beam_search(model, ids, compile=False, **options)["ids"],
                          autograph=False, input_signature=signature)
        for name in ("shipped", "whole-batch")
    }
    shipped_switch = phases.compacts
    outputs = {}
    for name, function in functions.items():  # traced (and warmed up) here, the switch as each variant needs
        phases.compacts = shipped_switch if name == "shipped" else (lambda jit_compile: False)
        try:
            outputs[name] = [np.asarray(function(batch)) for batch in batches]
        finally:
            phases.compacts = shipped_switch
    names = list(functions)
    same = sum(int(np.array_equal(a[row], b[row])) for a, b in zip(*outputs.values()) for row in range(len(a)))
    rounds = take_turns(names, lambda name: [np.asarray(functions[name](batch)) for batch in batches],
                        args.rounds, len(texts))
    record.update({
        "kind": "compaction",
        "workload": {"run": os.path.relpath(os.path.abspath(args.compaction), os.path.join(ROOT, "..")),
                     "split": "test", "sentences": len(texts), "model": config["model"]["preset"],
                     "batch_size": decoding["batch_size"], "beam_size": decoding["beam_size"],
                     "alpha": decoding["alpha"], "max_extra_length": decoding["max_extra_length"], "graph": "plain"},
        "same_outputs": same, "seconds": rounds,
        "results": [{"name": "shipped", "label": "as shipped: done sentences dropped between phases (reference)"},
                    {"name": "whole-batch", "label": "every sentence decoded until the batch is done "
                                                     "(phases.compacts off)"}],
    })
