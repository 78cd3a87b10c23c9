"""Periodic checkpoints, exact resumption after SIGKILL, checkpoint averaging."""

import json
import os
import signal
import sys
import time

import keras
import numpy as np
import pytest

from keras_transformer.training import (
    StepCheckpoint,
    average_checkpoints,
    latest_checkpoint,
    list_checkpoints,
    save_averaged_model,
)

VOCABULARY_SIZE, LENGTH, BATCH = 16, 6, 8
STEPS_PER_EPOCH, EPOCHS, SAVE_EVERY, KILL_AFTER = 5, 2, 3, 8


def child(work_dir, kill_after):
    """Trains 10 steps with fit_resumable; with kill_after > 0, writes a marker
    after that step and waits to be killed."""
    import tensorflow as tf

    from keras_transformer import Transformer
    from keras_transformer.training import (
        LabelSmoothedCrossEntropy,
        MaskedAccuracy,
        fit_resumable,
        paper_optimizer,
    )

    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(11)
    rng = np.random.default_rng(0)
    count = 24  # not a multiple of the batch: epochs of data and of training differ
    source = rng.integers(3, VOCABULARY_SIZE, size=(count, LENGTH)).astype("int32")
    lengths = rng.integers(2, LENGTH + 1, size=count)
    source[np.arange(LENGTH)[None, :] >= lengths[:, None]] = 0
    target_in = np.concatenate([np.ones((count, 1), "int32"), source], axis=1)
    labels = np.concatenate([source, np.zeros((count, 1), "int32")], axis=1)
    labels[np.arange(count), lengths] = 2  # EOS

    def make_dataset(start_step):
        examples = tf.data.Dataset.from_tensor_slices(
            ({"source": source, "target": target_in}, labels)
        )
        # A fixed-seed shuffle is the same sequence in every process.
        batches = examples.shuffle(count, seed=5, reshuffle_each_iteration=True).batch(BATCH)
        return batches.repeat().skip(start_step)

    # Dropout stays on: its seed-generator state is saved with the weights.
    model = Transformer.from_preset(
        "tiny", vocabulary_size=VOCABULARY_SIZE, d_model=32, d_ff=64,
        num_encoder_layers=1, num_decoder_layers=1, dropout=0.1,
    )
    model.compile(
        optimizer=paper_optimizer(model.d_model, warmup_steps=3),
        loss=LabelSmoothedCrossEntropy(),
        metrics=[MaskedAccuracy()],
    )

    class KillPoint(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.step = 0

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1
            if kill_after and self.step == kill_after:
                with open(os.path.join(work_dir, "marker"), "w") as handle:
                    handle.write(str(self.step))
                time.sleep(300)  # the parent kills us here, mid-epoch

    history = fit_resumable(
        model,
        make_dataset,
        epochs=EPOCHS,
        steps_per_epoch=STEPS_PER_EPOCH,
        checkpoint_dir=os.path.join(work_dir, "checkpoints"),
        save_every_steps=SAVE_EVERY,
        keep_last=5,
        callbacks=[KillPoint()],
        verbose=0,
    )
    np.savez(os.path.join(work_dir, "final.npz"), *model.get_weights())
    with open(os.path.join(work_dir, "history.json"), "w") as handle:
        json.dump(history, handle)


def test_resumes_after_sigkill_to_the_same_weights_as_an_uninterrupted_run(
    tmp_path, start_child, finish_child, saved_weights
):
    uninterrupted, interrupted = tmp_path / "uninterrupted", tmp_path / "interrupted"
    uninterrupted.mkdir()
    interrupted.mkdir()
    # Both start at once (they share nothing but the code).
    reference = start_child(__file__, uninterrupted, 0)
    crashing = start_child(__file__, interrupted, KILL_AFTER)
    marker = interrupted / "marker"
    deadline = time.time() + 240
    while not marker.exists() and crashing.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert marker.exists(), crashing.communicate()[0][-5000:]
    crashing.send_signal(signal.SIGKILL)
    crashing.communicate()
    assert crashing.returncode == -signal.SIGKILL
    checkpoints = interrupted / "checkpoints"
    # Saved after steps 3 and 6; the kill came after step 8, mid-epoch 2.
    assert latest_checkpoint(checkpoints)[0] == 6
    assert [step for step, _ in list_checkpoints(checkpoints)] == [3, 6]

    resumed = start_child(__file__, interrupted, 0)
    finish_child(resumed)
    finish_child(reference)
    with open(interrupted / "history.json") as handle:
        resumed_history = json.load(handle)
    assert len(resumed_history["loss"]) == 1  # only the rest of epoch 2 ran
    assert [step for step, _ in list_checkpoints(checkpoints)] == [3, 6, 9, 10]

    expected = saved_weights(uninterrupted / "final.npz")
    actual = saved_weights(interrupted / "final.npz")
    assert len(expected) == len(actual)
    for a, b in zip(expected, actual):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    # And the resumed run trained: its final weights are not those it resumed from
    # (a resumption that only reloaded step 6 would pass the comparison above
    # only if the reference had not trained either).
    at_step_6 = list(average_checkpoints([dict(list_checkpoints(checkpoints))[6]], last_n=None).values())
    assert len(at_step_6) == len(actual)

    def fingerprint(arrays):
        return sorted((a.shape, round(float(np.abs(a).sum()), 4)) for a in arrays)

    assert fingerprint(at_step_6) != fingerprint(actual)


# -- periodic checkpoints and averaging (no subprocess; helpers in conftest.py) --
def test_average_of_known_weight_files(tmp_path, small_model, write_known_checkpoints):
    # 1000 sorts after 300
    write_known_checkpoints(tmp_path, steps=[100, 200, 300, 1000], values=[1.0, 2.0, 4.0, 8.0])
    averages = average_checkpoints(tmp_path, last_n=3)
    assert averages and all(name.startswith("layers/") for name in averages)
    for name, array in averages.items():
        offset = np.arange(array.size).reshape(array.shape)
        np.testing.assert_allclose(array, (2.0 + 4.0 + 8.0) / 3 + offset, rtol=1e-6)
    every = average_checkpoints(tmp_path, last_n=None)
    for array in every.values():
        np.testing.assert_allclose(array.ravel()[0], (1 + 2 + 4 + 8) / 4, rtol=1e-6)

    # An averaged weights file loads into a model of the same architecture.
    output = tmp_path / "averaged.weights.h5"
    average_checkpoints(tmp_path, last_n=2, output_path=output)
    model = small_model()
    model.optimizer.build(model.trainable_variables)
    model.load_weights(output)
    for weight in model.get_weights():
        np.testing.assert_allclose(weight, 6.0 + np.arange(weight.size).reshape(weight.shape), rtol=1e-6)


def test_averaging_keras_files_and_writing_an_averaged_model(tmp_path, small_model):
    paths = []
    for index, value in enumerate([3.0, 5.0]):
        model = small_model()
        model.set_weights([np.full(w.shape, value, w.dtype) for w in model.get_weights()])
        path = tmp_path / f"epoch-{index}.keras"
        model.save(path)
        paths.append(path)
    target = small_model()
    saved = save_averaged_model(target, [str(p) for p in paths], tmp_path / "avg.keras", last_n=2)
    restored = keras.saving.load_model(tmp_path / "avg.keras")
    for weight in restored.get_weights():
        np.testing.assert_allclose(weight, 4.0)
    assert saved is target


def test_averaging_rejects_different_models_and_empty_input(tmp_path, write_known_checkpoints):
    write_known_checkpoints(tmp_path / "a", steps=[1])
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5, name="hidden")])
    other.save_weights(tmp_path / "a" / "ckpt-000000002.weights.h5")
    with pytest.raises(ValueError, match="same variables"):
        average_checkpoints(tmp_path / "a", last_n=2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.weights.h5"):
        average_checkpoints(tmp_path / "empty")
    with pytest.raises(ValueError, match="last_n"):
        average_checkpoints(tmp_path / "a", last_n=0)


def test_step_checkpoint_saves_periodically_and_keeps_the_last(tmp_path, small_model):
    model = small_model()
    checkpoint = StepCheckpoint(tmp_path, save_every_steps=2, keep_last=2)
    model.fit(np.ones((7, 3)), np.ones((7, 2)), batch_size=1, epochs=1, verbose=0, callbacks=[checkpoint])
    # 7 steps: saves at 2, 4, 6 and at the end (7); keeps the newest two.
    assert [step for step, _ in list_checkpoints(tmp_path)] == [6, 7]
    assert latest_checkpoint(tmp_path)[0] == 7
    # Leftovers of a crash while saving: a newer file latest.json does not
    # name yet, and a temporary file. Restoring drops both.
    stale = tmp_path / "ckpt-000000008.weights.h5"
    stale.write_bytes((tmp_path / "ckpt-000000007.weights.h5").read_bytes())
    (tmp_path / ".tmp-123-8.weights.h5").write_bytes(b"partial")
    fresh = small_model()
    restorer = StepCheckpoint(tmp_path, save_every_steps=2)
    assert restorer.restore(fresh) == 7
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000006.weights.h5", "ckpt-000000007.weights.h5", "latest.json"]
    for a, b in zip(model.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert int(fresh.optimizer.iterations.numpy()) == 7
    with pytest.raises(ValueError, match="save_every_steps"):
        StepCheckpoint(tmp_path, save_every_steps=0)


if __name__ == "__main__":
    child(sys.argv[1], int(sys.argv[2]))


def _count_traces(model):
    """Counts the Python calls of `model.train_step`: one per trace of the compiled step."""
    traces = []
    step = model.train_step

    def counted(data):
        traces.append(1)
        return step(data)

    model.train_step = counted
    return traces


def _regression_batches(start_step):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3)).astype("float32"), rng.normal(size=(32, 2)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat().skip(start_step)


def test_the_train_step_is_traced_once(tmp_path, small_model):
    """Keras' TensorFlow trainer creates the optimizer's variables in the
    first trace of the step, and a tf.function whose first trace created
    variables is traced again: fit_resumable builds them first."""
    from keras_transformer.training import fit_resumable

    model = small_model()
    traces = _count_traces(model)
    fit_resumable(model, _regression_batches, epochs=2, steps_per_epoch=3, checkpoint_dir=tmp_path / "ckpt",
                  save_every_steps=100, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 6
    assert len(traces) == 1


def test_a_model_that_cannot_be_built_ahead_still_trains(tmp_path, small_model):
    from keras_transformer.training import fit_resumable

    model = small_model()

    def refuse(**kwargs):
        raise RuntimeError("no symbolic build for this model")

    model._symbolic_build = refuse
    fit_resumable(model, _regression_batches, epochs=1, steps_per_epoch=3, checkpoint_dir=tmp_path / "ckpt",
                  save_every_steps=100, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 3
