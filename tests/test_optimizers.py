"""paper_optimizer: Adam constants, schedule, gradient accumulation semantics."""

import keras
import numpy as np
import pytest

from keras_transformer.training import LabelSmoothedCrossEntropy, NoamSchedule, paper_optimizer
from keras_transformer.training.optimizers import TransformerAdam

VOCAB, LENGTH, WIDTH = 12, 6, 8


def make_model(optimizer):
    keras.utils.set_random_seed(42)
    model = keras.Sequential(
        [
            keras.Input((LENGTH,), dtype="int32"),
            keras.layers.Embedding(VOCAB, WIDTH),
            keras.layers.Dense(WIDTH, activation="tanh"),
            keras.layers.Dense(VOCAB),
        ]
    )
    model.compile(optimizer=optimizer, loss=LabelSmoothedCrossEntropy())
    return model


def make_data(token_counts, seed=0):
    """Sequences with the given numbers of non-pad label tokens."""
    rng = np.random.default_rng(seed)
    x = rng.integers(1, VOCAB, size=(len(token_counts), LENGTH)).astype("int32")
    y = rng.integers(1, VOCAB, size=x.shape).astype("int32")
    for row, count in enumerate(token_counts):
        y[row, count:] = 0
    return x, y


def train(optimizer, x, y, batch_size, sample_weight=None, epochs=1):
    model = make_model(optimizer)
    model.fit(
        x, y, sample_weight=sample_weight, batch_size=batch_size, epochs=epochs,
        shuffle=False, verbose=0,
    )
    return model


def max_difference(model_a, model_b):
    return max(
        float(np.max(np.abs(a - b))) for a, b in zip(model_a.get_weights(), model_b.get_weights())
    )


def test_paper_constants_and_schedule():
    optimizer = paper_optimizer(512, warmup_steps=4000)
    assert isinstance(optimizer, keras.optimizers.Adam)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(optimizer._learning_rate, NoamSchedule)
    assert optimizer.gradient_accumulation_steps is None
    accumulating = paper_optimizer(512, gradient_accumulation_steps=4)
    assert accumulating.gradient_accumulation_steps == 4
    assert accumulating._learning_rate.gradient_accumulation_steps == 4
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="gradient_accumulation_steps"):
            paper_optimizer(512, gradient_accumulation_steps=bad)
    with pytest.raises(TypeError, match="learning_rate"):
        paper_optimizer(512, learning_rate=1e-3)


def test_two_half_batches_equal_one_full_batch_when_token_counts_match():
    # Halves with 14 and 14 label tokens (spread differently over the rows).
    x, y = make_data([6, 1, 3, 4, 2, 5, 3, 4] * 3)
    full = train(paper_optimizer(WIDTH, warmup_steps=3), x, y, batch_size=8)
    accumulated = train(
        paper_optimizer(WIDTH, warmup_steps=3, gradient_accumulation_steps=2), x, y, batch_size=4
    )
    assert int(keras.ops.convert_to_numpy(full.optimizer.iterations)) == 3
    assert int(keras.ops.convert_to_numpy(accumulated.optimizer.iterations)) == 3
    assert max_difference(full, accumulated) < 1e-5
    moved = make_model(paper_optimizer(WIDTH))
    assert max_difference(full, moved) > 1e-2  # the updates did something


@pytest.mark.parametrize("make_optimizer", [
    lambda n: keras.optimizers.SGD(0.5, gradient_accumulation_steps=n),
    lambda n: paper_optimizer(WIDTH, warmup_steps=3, gradient_accumulation_steps=n),
])
def test_accumulation_averages_micro_batch_means_when_token_counts_differ(make_optimizer):
    # Halves with 20 and 4 label tokens. Keras averages the two half-batch
    # gradients: each half-batch's token mean counts 1/2, which is a full-batch
    # step on token weights 1/(2 n_half), not the full-batch token mean.
    counts = [6, 5, 4, 5, 1, 1, 1, 1] * 2
    x, y = make_data(counts, seed=1)
    accumulated = train(make_optimizer(2), x, y, batch_size=4)
    weights = np.zeros(y.shape, "float32")
    for start in range(0, len(counts), 4):
        rows = slice(start, start + 4)
        weights[rows] = 1.0 / np.count_nonzero(y[rows])
    emulated = train(make_optimizer(None), x, y, batch_size=8, sample_weight=weights)
    token_mean = train(make_optimizer(None), x, y, batch_size=8)
    assert max_difference(accumulated, emulated) < 1e-5
    assert max_difference(accumulated, token_mean) > 100 * 1e-5


class OneHotLookup(keras.layers.Layer):
    """An embedding lookup written as one_hot @ table: a dense gradient."""

    def __init__(self, table, **kwargs):
        super().__init__(**kwargs)
        self.table = self.add_weight(shape=table.shape, initializer=keras.initializers.Constant(table))

    def call(self, ids):
        return keras.ops.matmul(keras.ops.one_hot(ids, self.table.shape[0]), self.table)


def test_repeated_embedding_rows_get_the_update_of_their_summed_gradient():
    # Tokens repeat within the batch. On TensorFlow an Embedding's gradient is
    # an IndexedSlices with repeated rows; the update must equal the one from
    # the same lookup done densely.
    rng = np.random.default_rng(3)
    table = rng.normal(size=(VOCAB, WIDTH)).astype("float32")
    ids = rng.integers(0, 4, size=(8, LENGTH)).astype("int32")
    targets = rng.normal(size=(8, LENGTH, WIDTH)).astype("float32")
    results = []
    for lookup in (
        keras.layers.Embedding(VOCAB, WIDTH, embeddings_initializer=keras.initializers.Constant(table)),
        OneHotLookup(table),
    ):
        model = keras.Sequential([keras.Input((LENGTH,), dtype="int32"), lookup])
        model.compile(optimizer=paper_optimizer(WIDTH, warmup_steps=2), loss="mse")
        model.fit(ids, targets, batch_size=4, epochs=2, shuffle=False, verbose=0)
        results.append(model.get_weights()[0])
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)
    assert np.abs(results[0] - table).max() > 1e-2


class KerasAdamUpdate(TransformerAdam):
    """TransformerAdam with keras.optimizers.Adam's own update step."""

    def update_step(self, gradient, variable, learning_rate):
        keras.optimizers.Adam.update_step(self, gradient, variable, learning_rate)


@pytest.mark.parametrize("accumulation", [None, 2])
def test_update_equals_keras_adam(accumulation):
    # On TensorFlow TransformerAdam runs TensorFlow's fused Adam kernel; it
    # must update weights and moments exactly as keras.optimizers.Adam does.
    ours = paper_optimizer(WIDTH, warmup_steps=3, gradient_accumulation_steps=accumulation)
    reference = KerasAdamUpdate(
        NoamSchedule(WIDTH, warmup_steps=3, gradient_accumulation_steps=accumulation or 1),
        gradient_accumulation_steps=accumulation,
    )
    x, y = make_data([LENGTH, 3, 5, 1, 4, LENGTH, 2, 6])
    trained = [train(optimizer, x, y, batch_size=2, epochs=2) for optimizer in (ours, reference)]
    assert max_difference(*trained) < 1e-5  # float32 rounding of two formulas
    start = make_model(paper_optimizer(WIDTH))
    assert max_difference(trained[0], start) > 1e-3  # the weights did move
    for ours_slot, reference_slot in zip(ours.variables, reference.variables):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(ours_slot), keras.ops.convert_to_numpy(reference_slot),
            rtol=1e-4, atol=1e-8,  # the fused kernel rounds b1*m + (1-b1)*g, Keras m + (g-m)(1-b1)
        )


def test_fused_kernel_runs_on_tensorflow(monkeypatch):
    # The equality test above would also pass if the fused path were never
    # taken; check that it is (and that it is not taken elsewhere).
    import keras_transformer.training.optimizers as optimizers_module

    calls = []
    original = optimizers_module.fused_adam_update

    def counting(*args, **kwargs):
        calls.append(original(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(optimizers_module, "fused_adam_update", counting)
    variable = keras.Variable(np.ones((3,), "float32"))
    optimizer = paper_optimizer(WIDTH)
    optimizer.build([variable])
    optimizer.apply([keras.ops.ones((3,))], [variable])
    assert calls == [keras.backend.backend() == "tensorflow"]
    assert np.all(keras.ops.convert_to_numpy(variable) < 1.0)
