"""NoamSchedule: the paper's formula, serialization, use by an optimizer."""

import keras
import numpy as np
import pytest

import keras_transformer
from keras_transformer.training import NoamSchedule, paper_optimizer


def paper_rate(step, d_model, warmup, scale=1.0):
    # Section 5.3, with `step` counted from 1.
    step = np.asarray(step, dtype=np.float64)
    return scale * d_model**-0.5 * np.minimum(step**-0.5, step * warmup**-1.5)


def evaluate(schedule, iterations):
    return np.array(
        [float(keras.ops.convert_to_numpy(schedule(i))) for i in iterations]
    )


def test_matches_paper_formula_from_step_one():
    schedule = NoamSchedule(512, warmup_steps=4000)
    iterations = np.array([0, 1, 9, 999, 3998, 3999, 4000, 4001, 20000, 99999])
    expected = paper_rate(iterations + 1, 512, 4000)
    np.testing.assert_allclose(evaluate(schedule, iterations), expected, rtol=1e-5)


def test_peak_is_at_warmup_and_scale_multiplies():
    d_model, warmup = 256, 100
    schedule = NoamSchedule(d_model, warmup_steps=warmup, scale=2.0)
    rates = evaluate(schedule, range(0, 400))
    assert int(np.argmax(rates)) + 1 == warmup
    np.testing.assert_allclose(rates.max(), 2.0 * (d_model * warmup) ** -0.5, rtol=1e-5)
    unscaled = evaluate(NoamSchedule(d_model, warmup_steps=warmup), range(0, 400))
    np.testing.assert_allclose(rates, 2.0 * unscaled, rtol=1e-6)


def test_accepts_tensor_steps_of_several_dtypes():
    schedule = NoamSchedule(64, warmup_steps=10)
    for dtype in ("int32", "float32"):
        step = keras.ops.convert_to_tensor(np.array(5), dtype=dtype)
        value = float(keras.ops.convert_to_numpy(schedule(step)))
        np.testing.assert_allclose(value, paper_rate(6, 64, 10), rtol=1e-5)


def test_counts_updates_under_gradient_accumulation():
    # With N micro-batches per update, iterations k*N-1 .. k*N-1 all belong to
    # update k (the Keras optimizer applies update k when iterations=k*N-1).
    schedule = NoamSchedule(128, warmup_steps=50, gradient_accumulation_steps=4)
    iterations = np.arange(0, 400)
    expected = paper_rate(iterations // 4 + 1, 128, 50)
    np.testing.assert_allclose(evaluate(schedule, iterations), expected, rtol=1e-5)


def test_config_round_trip_and_registration():
    schedule = NoamSchedule(512, warmup_steps=8000, scale=0.5)
    config = keras.saving.serialize_keras_object(schedule)
    assert "keras_transformer" in config["registered_name"]
    restored = keras.saving.deserialize_keras_object(config)
    assert isinstance(restored, NoamSchedule)
    assert restored.get_config() == schedule.get_config()
    np.testing.assert_allclose(evaluate(restored, [0, 7999, 50000]), evaluate(schedule, [0, 7999, 50000]))
    assert keras_transformer.NoamSchedule is NoamSchedule


@pytest.mark.parametrize(
    "kwargs",
    [
        {"d_model": 0},
        {"d_model": -4},
        {"d_model": 512.5},
        {"d_model": 512, "warmup_steps": 0},
        {"d_model": 512, "scale": 0.0},
        {"d_model": "512"},
    ],
)
def test_rejects_bad_arguments_by_name(kwargs):
    with pytest.raises((ValueError, TypeError)) as error:
        NoamSchedule(**kwargs)
    bad = [k for k in kwargs if k != "d_model"] or ["d_model"]
    assert bad[-1] in str(error.value)


def test_optimizer_with_schedule_round_trips_through_keras_file(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=paper_optimizer(64, warmup_steps=30, scale=3.0), loss="mse")
    x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    y = np.random.default_rng(1).normal(size=(16, 3)).astype("float32")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # 4 updates
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    schedule = restored.optimizer._learning_rate
    assert isinstance(schedule, NoamSchedule)
    assert schedule.get_config() == model.optimizer._learning_rate.get_config()
    assert restored.optimizer.beta_2 == pytest.approx(0.98)
    assert restored.optimizer.epsilon == pytest.approx(1e-9)
    assert int(keras.ops.convert_to_numpy(restored.optimizer.iterations)) == 4
    # The current learning rate continues from the restored step (step 5).
    np.testing.assert_allclose(
        float(keras.ops.convert_to_numpy(restored.optimizer.learning_rate)),
        paper_rate(5, 64, 30, scale=3.0),
        rtol=1e-5,
    )
    # Training continues identically from both models.
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    restored.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    for a, b in zip(model.get_weights(), restored.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
