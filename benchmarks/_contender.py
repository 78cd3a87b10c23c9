"""The one shape of a benchmark contender, and what the Keras contenders share.

A contender is a harness around one implementation of the Transformer. The
scripts ask it for three things and nothing else:

- `build(size, policy=None)`: a model of `size` (a dict: vocab, d_model,
  layers, heads, d_ff, dropout; the throughput scripts pass
  `_workloads.SIZE`) ready to train: compiled with its loss and optimizer
  (ours: `LabelSmoothedCrossEntropy(0.1)` and `paper_optimizer`, unless the
  contender is labelled otherwise). `policy` is a Keras dtype policy
  ("mixed_bfloat16"), or None for float32.
- `train_steps(model, batches, steps, warmup)`: `warmup` untimed steps, then
  `steps` timed ones over the cycled `batches` ((source, target_in, labels)
  arrays); returns {"seconds", "steps", "target_tokens"} of the timed steps
  (train_throughput.py).
- `train_for(model, dataset, minutes)`: trains on a repeating tf.data
  pipeline until the first step that ends past `minutes`; returns the
  `_quality_common.Clock` (steps, seconds) (quality.py).
- `decode(model, tokenizer, sources, search)`: the contender's beam search on
  raw sentences; `search` is `SEARCH` below, the same for every contender:
  beam 4, the GNMT length penalty ((5 + |Y|) / 6) ** 0.6 with |Y| counting
  EOS, at most (source tokens, EOS included) + 50 output tokens per
  sentence, batches of 64 sentences sorted by length.

`name`, `label` (what the row is, printed under tables and kept in records)
and `backend` (the KERAS_BACKEND its process needs) describe it. Contenders
that live in another process (OpenNMT-tf in its own virtual environment) keep
the same three verbs, carried out by a worker script.
"""


SEARCH = {"beam_size": 4, "alpha": 0.6, "max_extra_length": 50, "batch_size": 64, "max_source_length": 128}


class Contender:
    name = ""
    label = ""
    backend = "tensorflow"

    def build(self, size, policy=None):
        raise NotImplementedError(f"{self.name}: no in-process model")

    def train_steps(self, model, batches, steps, warmup):
        """Keras contenders: `model.fit` over the cycled batches, timed from the end of the warm-up."""
        from benchmarks._workloads import timed_fit

        return timed_steps(timed_fit(model, batches, steps, warmup), batches, steps, warmup)

    def train_for(self, model, dataset, minutes):
        """Keras contenders: `model.fit` on `dataset` until the first step that ends past `minutes`."""
        import keras

        from benchmarks._quality_common import Clock

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
    from benchmarks._workloads import target_tokens

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
