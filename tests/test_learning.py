"""End to end: the tiny Transformer learns a small task with the paper's
objective, optimizer and schedule; mixed precision trains without overflow."""

import time

import keras
import numpy as np
import pytest

from keras_transformer import Transformer
from keras_transformer.training import LabelSmoothedCrossEntropy, MaskedAccuracy, paper_optimizer

PAD, BOS, EOS, FIRST_SYMBOL = 0, 1, 2, 3
BACKEND = keras.backend.backend()


def reverse_task(count, vocabulary_size, max_length, seed):
    """Sources of 4..max_length random symbols; the target is the source
    reversed. Inputs {"source", "target": BOS + y}, labels y + EOS, pad 0."""
    rng = np.random.default_rng(seed)
    source = np.zeros((count, max_length), "int32")
    target_in = np.zeros((count, max_length + 1), "int32")
    labels = np.zeros((count, max_length + 1), "int32")
    for row in range(count):
        length = rng.integers(max_length // 2, max_length + 1)
        symbols = rng.integers(FIRST_SYMBOL, vocabulary_size, size=length)
        reversed_symbols = symbols[::-1]
        source[row, :length] = symbols
        target_in[row, 0] = BOS
        target_in[row, 1 : length + 1] = reversed_symbols
        labels[row, :length] = reversed_symbols
        labels[row, length] = EOS
    return {"source": source, "target": target_in}, labels


def compile_small_transformer(vocabulary_size, warmup_steps, scale, **overrides):
    keras.utils.set_random_seed(0)
    # The "tiny" preset, narrowed so that it learns within a CPU minute.
    sizes = dict(d_model=64, d_ff=128, num_encoder_layers=2, num_decoder_layers=2, dropout=0.0)
    sizes.update(overrides)
    model = Transformer.from_preset("tiny", vocabulary_size=vocabulary_size, **sizes)
    model.compile(
        optimizer=paper_optimizer(model.d_model, warmup_steps=warmup_steps, scale=scale),
        loss=LabelSmoothedCrossEntropy(label_smoothing=0.1),
        metrics=[MaskedAccuracy()],
    )
    return model


class StopAtAccuracy(keras.callbacks.Callback):
    def __init__(self, target):
        super().__init__()
        self.target = target

    def on_epoch_end(self, epoch, logs=None):
        if logs["val_masked_accuracy"] >= self.target:
            self.model.stop_training = True


@pytest.mark.skipif(BACKEND == "torch", reason="eager torch on CPU is too slow for this run; see the short torch test")
def test_learns_to_reverse_sequences():
    vocabulary_size, max_length = 16, 8
    x, y = reverse_task(4096, vocabulary_size, max_length, seed=0)
    held_out = reverse_task(512, vocabulary_size, max_length, seed=1)
    model = compile_small_transformer(vocabulary_size, warmup_steps=100, scale=0.3)
    before = model.evaluate(*held_out, batch_size=256, verbose=0, return_dict=True)
    cpu_start, wall_start = time.process_time(), time.time()
    # At most 6 epochs of 64 steps; stops at the first epoch whose held-out
    # masked token accuracy reaches 97%.
    history = model.fit(
        x, y, batch_size=64, epochs=6, validation_data=held_out, validation_batch_size=256,
        callbacks=[StopAtAccuracy(0.97)], verbose=0,
    ).history
    cpu_seconds, wall_seconds = time.process_time() - cpu_start, time.time() - wall_start
    print(
        f"\n[{BACKEND}] reverse task: {64 * len(history['loss'])} steps in {cpu_seconds:.1f} s CPU "
        f"({wall_seconds:.1f} s wall, tracing included); held-out masked accuracy "
        f"{before['masked_accuracy']:.3f} -> {np.round(history['val_masked_accuracy'], 3).tolist()}, "
        f"loss {before['loss']:.3f} -> {np.round(history['val_loss'], 3).tolist()}"
    )
    assert np.all(np.isfinite(history["loss"]))
    # The minimum of this label-smoothed loss (eps 0.1, V 16) is about 0.5.
    assert history["val_loss"][-1] < 0.5 * before["loss"]
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    if BACKEND == "tensorflow":
        assert max(history["val_masked_accuracy"]) >= 0.95


@pytest.mark.skipif(BACKEND != "torch", reason="the full run covers the other backends")
def test_loss_decreases_under_torch():
    vocabulary_size, max_length = 16, 6
    x, y = reverse_task(384, vocabulary_size, max_length, seed=0)
    model = compile_small_transformer(vocabulary_size, warmup_steps=8, scale=0.5)
    before = model.evaluate(x, y, batch_size=384, verbose=0, return_dict=True)["loss"]
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    after = model.evaluate(x, y, batch_size=384, verbose=0, return_dict=True)["loss"]
    print(f"\n[torch] 12 steps: loss {before:.3f} -> {after:.3f}")
    assert after < 0.8 * before


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_trains_without_overflow(policy):
    keras.config.set_dtype_policy(policy)  # conftest restores the policy
    vocabulary_size = 32
    x, y = reverse_task(24, vocabulary_size, 6, seed=2)
    # One layer each way: the cost of this test is tracing/compiling the step.
    model = compile_small_transformer(
        vocabulary_size, warmup_steps=3, scale=1.0, dropout=0.1,
        num_encoder_layers=1, num_decoder_layers=1,
    )
    if policy == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    initial = [np.array(w) for w in model.get_weights()]
    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    logits = keras.ops.convert_to_numpy(model({k: v[:4] for k, v in x.items()}, training=False))
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)), losses
    assert np.all(np.isfinite(logits.astype("float32")))
    weights = model.get_weights()
    assert all(np.all(np.isfinite(np.asarray(w, "float32"))) for w in weights)
    changed = sum(not np.array_equal(a, b) for a, b in zip(initial, weights))
    assert changed >= len(weights) // 2  # updates were applied, not all skipped
