"""Faults during training: SIGKILL while a checkpoint is written and during
validation, damaged checkpoints, a NaN or infinite loss.

The SIGKILL tests run a small model with dropout (its seed-generator state is
checkpointed) in subprocesses that kill themselves at a chosen point, restart
them, and compare the final weights with an uninterrupted run. SIGKILL inside
an epoch (the Transformer itself) is tested in test_checkpoints.py.
"""

import json
import os
import signal
import sys
import warnings

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.training import (
    CorruptCheckpointError,
    NonFiniteWeightsError,
    StepCheckpoint,
    TerminateOnNonFiniteLoss,
    average_checkpoints,
    fit_resumable,
    latest_checkpoint,
    list_checkpoints,
    verify_checkpoint,
)

VOCABULARY_SIZE, LENGTH, BATCH = 16, 5, 8
# 3 epochs of 3 steps, a checkpoint every 2 steps: epoch 0 ends on an unsaved
# step (3), epoch 1 on a saved one (6). 28 examples make 4 batches, so epochs
# of data and of training differ.
STEPS_PER_EPOCH, EPOCHS, SAVE_EVERY, EXAMPLES = 3, 3, 2, 28


def child(work_dir, kill_at):
    """Trains with fit_resumable and validation; kills itself with SIGKILL at
    `kill_at`: "save:N" (inside StepCheckpoint.save of step N, the temporary
    file written but not yet sealed), "pointer:N" (checkpoint N renamed into
    place, latest.json not yet updated), "eval:E" (after the first validation
    batch of epoch E), "none"."""
    from keras_transformer.training import checkpoint_files, paper_optimizer

    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, VOCABULARY_SIZE, size=(EXAMPLES + 12, LENGTH)).astype("int32")
    labels = (tokens * 3 + 1) % VOCABULARY_SIZE

    def make_dataset(start_step):
        examples = tf.data.Dataset.from_tensor_slices((tokens[:EXAMPLES], labels[:EXAMPLES]))
        batches = examples.shuffle(EXAMPLES, seed=5, reshuffle_each_iteration=True).batch(BATCH)
        return batches.repeat().skip(start_step)

    validation = tf.data.Dataset.from_tensor_slices((tokens[EXAMPLES:], labels[EXAMPLES:])).batch(BATCH)

    model = keras.Sequential([
        keras.Input((LENGTH,), dtype="int32"),
        keras.layers.Embedding(VOCABULARY_SIZE, 8),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(VOCABULARY_SIZE),
    ])
    model.compile(
        optimizer=paper_optimizer(8, warmup_steps=3, scale=4.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )

    kind, _, where = kill_at.partition(":")

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if kind == "save":
        write_digest = checkpoint_files.write_digest

        def write_digest_then_die(path):
            if path.endswith(f"-{where}.weights.h5"):
                die()
            write_digest(path)

        checkpoint_files.write_digest = write_digest_then_die
    if kind == "pointer":
        write_json = checkpoint_files.atomic_write_json

        def write_json_then_die(path, payload):
            if path.endswith("latest.json") and payload["step"] == int(where):
                die()
            write_json(path, payload)

        checkpoint_files.atomic_write_json = write_json_then_die

    class DieDuringValidation(keras.callbacks.Callback):
        epoch = None

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_test_batch_end(self, batch, logs=None):
            if kind == "eval" and self.epoch == int(where) and batch == 0:
                die()

    history = fit_resumable(
        model,
        make_dataset,
        epochs=EPOCHS,
        steps_per_epoch=STEPS_PER_EPOCH,
        checkpoint_dir=os.path.join(work_dir, "checkpoints"),
        save_every_steps=SAVE_EVERY,
        keep_last=5,
        callbacks=[DieDuringValidation()],
        validation_data=validation,
        shuffle=False,
        verbose=0,
    )
    np.savez(os.path.join(work_dir, "final.npz"), *model.get_weights())
    with open(os.path.join(work_dir, "history.json"), "w") as handle:
        json.dump(history, handle)


@pytest.fixture(scope="session")
def run_child(start_child, finish_child):
    """`run_child(work_dir, kill_at)`: runs the child to its end ("none") or to its SIGKILL."""

    def run(work_dir, kill_at):
        finish_child(start_child(__file__, work_dir, kill_at), 0 if kill_at == "none" else -signal.SIGKILL)

    return run


@pytest.fixture(scope="session")
def results(saved_weights):
    """`results(work_dir) -> (final weights, history)` of a finished child."""

    def read(work_dir):
        with open(work_dir / "history.json") as handle:
            return saved_weights(work_dir / "final.npz"), json.load(handle)

    return read


@pytest.fixture(scope="module")
def reference(tmp_path_factory, start_child, finish_child, results):
    """The uninterrupted run, started at once and awaited on first use (it
    runs beside the first test's subprocess)."""
    work_dir = tmp_path_factory.mktemp("uninterrupted")
    process = start_child(__file__, work_dir, "none")

    def wait():
        if process.returncode is None:
            finish_child(process)
        return results(work_dir)

    yield wait
    if process.poll() is None:
        process.kill()
        process.communicate()


def assert_same_final_weights(work_dir, reference, results):
    expected, expected_history = reference()
    actual, history = results(work_dir)
    assert len(actual) == len(expected) == 3  # embedding, kernel, bias
    for a, b in zip(expected, actual):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)
    # The run learned something: the test would notice a resume that loses steps.
    assert expected_history["loss"][-1] < expected_history["loss"][0]
    return history, expected_history


def steps(directory):
    return [step for step, _ in list_checkpoints(directory)]


def test_sigkill_while_writing_a_checkpoint(tmp_path, reference, run_child, results):
    checkpoints = tmp_path / "checkpoints"
    # Killed inside the save of step 4: its temporary file is written but
    # unsealed; latest.json still names step 2.
    run_child(tmp_path, "save:4")
    assert steps(checkpoints) == [2]
    assert latest_checkpoint(checkpoints)[0] == 2
    partial = [name for name in os.listdir(checkpoints) if name.startswith(".tmp-")]
    assert len(partial) == 1 and partial[0].endswith("-4.weights.h5")
    # Resumed from 2, killed between renaming checkpoint 8 into place and
    # recording it in latest.json.
    run_child(tmp_path, "pointer:8")
    assert steps(checkpoints) == [2, 4, 6, 8]
    assert latest_checkpoint(checkpoints)[0] == 6
    assert verify_checkpoint(checkpoints / "ckpt-000000008.weights.h5")
    assert not [name for name in os.listdir(checkpoints) if name.startswith(".tmp-")]
    # Resumed from 6 (the unrecorded 8 is written again), to the end.
    run_child(tmp_path, "none")
    assert steps(checkpoints) == [2, 4, 6, 8, 9]
    history, _ = assert_same_final_weights(tmp_path, reference, results)
    assert len(history["loss"]) == 1  # only the rest of epoch 2 ran


def test_sigkill_during_validation(tmp_path, reference, run_child, results):
    checkpoints = tmp_path / "checkpoints"
    # Validation follows the epoch's last step. Epoch 0 ends on step 3, which
    # is not a checkpoint: killed while validating it, the run resumes from 2
    # and runs step 3 and the validation again.
    run_child(tmp_path, "eval:0")
    assert steps(checkpoints) == [2]
    # Epoch 1 ends on step 6, saved before its validation started: killed
    # while validating, the run resumes at the start of epoch 2.
    run_child(tmp_path, "eval:1")
    assert steps(checkpoints) == [2, 4, 6]
    assert latest_checkpoint(checkpoints)[0] == 6
    run_child(tmp_path, "none")
    assert steps(checkpoints) == [2, 4, 6, 8, 9]
    history, expected_history = assert_same_final_weights(tmp_path, reference, results)
    assert len(history["loss"]) == 1
    # Validation of the last epoch sees the same weights as the reference's.
    np.testing.assert_allclose(history["val_loss"][-1], expected_history["val_loss"][-1], rtol=1e-6)


# -- damaged checkpoints (in process; helpers in conftest.py) -------------------
def flip_a_weight_byte(path):
    with h5py.File(path, "r") as handle:
        offset = handle["layers/dense/vars/0"].id.get_offset()
    with open(path, "r+b") as handle:
        handle.seek(offset + 1)
        byte = handle.read(1)
        handle.seek(offset + 1)
        handle.write(bytes([byte[0] ^ 0x10]))
    with h5py.File(path, "r") as handle:  # HDF5 itself does not notice
        handle["layers/dense/vars/0"][()]


def delete_variable(path, name, unseal=False):
    with h5py.File(path, "a") as handle:
        del handle[name]
        if unseal:  # as written before checkpoints carried a digest
            del handle.attrs["keras_transformer_sha256"]


def damage(path, how):
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        return "cannot be read"
    if how == "not_hdf5":
        path.write_bytes(b"\x00" * 4096)
        return "cannot be read"
    if how == "bit_flip":
        flip_a_weight_byte(path)
        return "no longer match the SHA-256 digest"
    if how == "deleted_variable":
        delete_variable(path, "layers/dense_1/vars/1")
        return "no longer match the SHA-256 digest"
    if how == "unsealed_missing_optimizer_variable":
        # Keras alone would only warn and resume with a fresh optimizer state.
        delete_variable(path, "optimizer/vars/3", unseal=True)
        return "Skipping variable loading for optimizer"
    if how == "unsealed_nan":
        with h5py.File(path, "a") as handle:
            handle["layers/dense/vars/0"][0, 0] = np.nan
            del handle.attrs["keras_transformer_sha256"]
        return "NaN or infinite"
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    ["truncated", "not_hdf5", "bit_flip", "deleted_variable", "unsealed_missing_optimizer_variable", "unsealed_nan"],
)
def test_damaged_newest_checkpoint_falls_back_to_the_previous_one(
    tmp_path, how, small_model, weights_of, write_known_checkpoints,
):
    write_known_checkpoints(tmp_path)
    newest = tmp_path / "ckpt-000000003.weights.h5"
    reason = damage(newest, how)
    model = small_model()
    restorer = StepCheckpoint(tmp_path, save_every_steps=1)
    with pytest.warns(UserWarning) as caught:
        assert restorer.restore(model) == 2
    messages = [str(w.message) for w in caught if str(newest) in str(w.message)]
    assert len(messages) == 1, [str(w.message) for w in caught]
    assert reason in messages[0] and "resuming from" in messages[0] and "ckpt-000000002" in messages[0]
    for actual, expected in zip(model.get_weights(), weights_of(2.0, model)):
        np.testing.assert_array_equal(actual, expected)
    assert int(model.optimizer.iterations.numpy()) == 7  # optimizer state restored too
    # Set aside for inspection, and latest.json now names the checkpoint used.
    assert sorted(os.listdir(tmp_path)) == [
        "ckpt-000000001.weights.h5", "ckpt-000000002.weights.h5", "ckpt-000000003.weights.h5.corrupt", "latest.json"
    ]
    assert latest_checkpoint(tmp_path)[0] == 2
    assert restorer.step == 2


def test_no_intact_checkpoint_is_a_clear_error_and_changes_nothing(
    tmp_path, small_model, write_known_checkpoints,
):
    write_known_checkpoints(tmp_path, steps=(1, 2))
    damage(tmp_path / "ckpt-000000002.weights.h5", "truncated")
    damage(tmp_path / "ckpt-000000001.weights.h5", "bit_flip")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(CorruptCheckpointError) as raised:
        StepCheckpoint(tmp_path, save_every_steps=1).restore(small_model())
    message = str(raised.value)
    assert f"no intact checkpoint in {tmp_path}" in message
    assert "ckpt-000000002.weights.h5 cannot be read" in message
    assert "ckpt-000000001.weights.h5 is corrupt" in message
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("pointer", ["bad_json", "wrong_name", "missing", "names_missing_file"])
def test_unusable_latest_json_falls_back_to_the_files(
    tmp_path, pointer, small_model, weights_of, write_known_checkpoints,
):
    write_known_checkpoints(tmp_path)
    latest = tmp_path / "latest.json"
    if pointer == "bad_json":
        latest.write_text('{"step": 3, "pa')
        expected_step, says = 3, "latest.json is unreadable"
    elif pointer == "wrong_name":
        latest.write_text(json.dumps({"step": 3, "path": "../elsewhere.weights.h5"}))
        expected_step, says = 3, "latest.json is unreadable"
    elif pointer == "missing":
        latest.unlink()
        expected_step, says = 3, "no latest.json"
    else:
        (tmp_path / "ckpt-000000003.weights.h5").unlink()
        expected_step, says = 2, "names ckpt-000000003.weights.h5, which does not exist"
    assert latest_checkpoint(tmp_path)[0] == expected_step
    model = small_model()
    with pytest.warns(UserWarning, match=says):
        assert StepCheckpoint(tmp_path, save_every_steps=1).restore(model) == expected_step
    np.testing.assert_array_equal(model.get_weights()[0], weights_of(float(expected_step), model)[0])
    # The pointer is repaired.
    assert json.loads(latest.read_text())["step"] == expected_step
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert StepCheckpoint(tmp_path, save_every_steps=1).restore(small_model()) == expected_step


def test_intact_checkpoint_of_another_model_is_an_error_not_a_fallback(tmp_path, write_known_checkpoints):
    write_known_checkpoints(tmp_path)
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5, name="hidden"), keras.layers.Dense(2)])
    other.compile(optimizer="adam", loss="mse")
    other.build((None, 3))
    with pytest.raises(ValueError, match="ckpt-000000003.weights.h5 is intact but does not fit the model"):
        StepCheckpoint(tmp_path, save_every_steps=1).restore(other)
    assert steps(tmp_path) == [1, 2, 3]


def test_averaging_names_a_damaged_checkpoint(tmp_path, write_known_checkpoints):
    write_known_checkpoints(tmp_path)
    damage(tmp_path / "ckpt-000000002.weights.h5", "bit_flip")
    with pytest.raises(CorruptCheckpointError, match="ckpt-000000002.weights.h5 is corrupt"):
        average_checkpoints(tmp_path, last_n=3)
    # An averaged weights file carries a digest of its own contents.
    output = tmp_path / "avg.weights.h5"
    average_checkpoints(tmp_path, last_n=1, output_path=output)
    assert verify_checkpoint(output)


# -- NaN or infinite loss -------------------------------------------------------
SAMPLES_PER_STEP = 2


def poisoned_data(bad_step, steps_total=10):
    """Batches whose loss is finite except at global step `bad_step` (1-based)."""
    rng = np.random.default_rng(1)
    inputs = rng.normal(size=(steps_total * SAMPLES_PER_STEP, 3)).astype("float32")
    targets = rng.normal(size=(steps_total * SAMPLES_PER_STEP, 2)).astype("float32")
    if bad_step:
        inputs[(bad_step - 1) * SAMPLES_PER_STEP] = np.inf
    batches = tf.data.Dataset.from_tensor_slices((inputs, targets)).batch(SAMPLES_PER_STEP)
    return lambda start: batches.skip(start)


@pytest.mark.parametrize("bad_step", [5, 6])  # between checkpoints, on a checkpoint step
def test_non_finite_loss_stops_training_and_leaves_a_finite_checkpoint(tmp_path, bad_step, small_model):
    model = small_model()
    guard = TerminateOnNonFiniteLoss()
    with pytest.warns((RuntimeWarning, UserWarning)) as caught:
        history = fit_resumable(
            model, poisoned_data(bad_step), epochs=2, steps_per_epoch=5,
            checkpoint_dir=tmp_path, save_every_steps=2, keep_last=None,
            callbacks=[guard], shuffle=False, verbose=0,
        )
    assert guard.step == bad_step and not np.isfinite(guard.loss)
    message = f"the loss became {guard.loss} at step {bad_step}; training stopped"
    assert [str(w.message) for w in caught if message in str(w.message)] == [guard.message]
    assert [str(w.message) for w in caught if w.category is UserWarning] == [
        f"StepCheckpoint: not saving step {bad_step}: the loss is {guard.loss}; "
        f"no more checkpoints in this fit (the newest checkpoint is {tmp_path / 'ckpt-000000004.weights.h5'})."
    ]
    assert "ckpt-000000004.weights.h5, is from step 4" in guard.message
    # Training stopped at the bad step (no later step ran) ...
    assert int(model.optimizer.iterations.numpy()) == bad_step
    assert len(history["loss"]) == (1 if bad_step <= 5 else 2)
    assert not all(np.isfinite(w).all() for w in model.get_weights())
    # ... and no checkpoint was written from it or after it, not even at the end.
    assert steps(tmp_path) == [2, 4]
    restored = small_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert StepCheckpoint(tmp_path, save_every_steps=2).restore(restored) == 4
    assert all(np.isfinite(w).all() for w in restored.get_weights())


def test_non_finite_loss_in_a_resumed_epoch_does_not_start_the_next_fit(tmp_path, small_model):
    class StopAfterThree(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 3:
                self.model.stop_training = True

    first = small_model()
    fit_resumable(first, poisoned_data(None), epochs=2, steps_per_epoch=5, checkpoint_dir=tmp_path,
                  save_every_steps=2, keep_last=None, callbacks=[StopAfterThree()], shuffle=False, verbose=0)
    assert steps(tmp_path) == [2, 3]  # saved at 2 and where training stopped
    # Resumed mid-epoch 0 (fit runs the rest of it, then epoch 1 separately):
    # the loss diverges at step 4; epoch 1 must not start.
    model = small_model()
    guard = TerminateOnNonFiniteLoss()
    with pytest.warns((RuntimeWarning, UserWarning)) as caught:
        history = fit_resumable(model, poisoned_data(4), epochs=2, steps_per_epoch=5, checkpoint_dir=tmp_path,
                                save_every_steps=2, keep_last=None, callbacks=[guard], shuffle=False, verbose=0)
    assert guard.step == 4
    assert sorted(str(w.message).split(";")[0] for w in caught if w.category in (RuntimeWarning, UserWarning)) == [
        "StepCheckpoint: not saving step 4: the loss is nan", "the loss became nan at step 4"
    ]
    assert int(model.optimizer.iterations.numpy()) == 4
    assert len(history["loss"]) == 1
    assert steps(tmp_path) == [2, 3]


def test_non_finite_weights_are_never_saved(tmp_path, small_model):
    class PoisonAtStepFour(keras.callbacks.Callback):
        """NaN weights after a step whose loss was finite (runs before the checkpoint)."""

        def on_train_batch_end(self, batch, logs=None):
            if batch == 3:
                weights = self.model.get_weights()
                weights[0][0, 0] = np.nan
                self.model.set_weights(weights)

    model = small_model()
    checkpoint = StepCheckpoint(tmp_path, save_every_steps=2)
    with pytest.warns(UserWarning, match=r"not saving step 4 .*NaN or infinite values \(in layers/dense/vars/0\)"):
        model.fit(poisoned_data(None)(0), epochs=1, steps_per_epoch=5, shuffle=False, verbose=0,
                  callbacks=[PoisonAtStepFour(), checkpoint])
    assert checkpoint.diverged_step == 4
    assert steps(tmp_path) == [2]  # neither 4 nor the end (5)
    # Saving by hand refuses too, and leaves no temporary file.
    checkpoint.step = 7
    with pytest.raises(NonFiniteWeightsError, match="not saving step 7 to .*ckpt-000000007.weights.h5"):
        checkpoint.save()
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000002.weights.h5", "latest.json"]


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
