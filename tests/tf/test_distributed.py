"""MirroredStrategy on two logical CPUs follows a one-device run exactly.

TensorFlow must be told to split the CPU before it initialises its devices,
so the work runs in a fresh subprocess (this file, run as a script).
"""

import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: reversal_task

from reversal_task import PAD, concatenated, load_arrays, reversal_batches, tiny_transformer  # noqa: E402

GLOBAL_BATCH, STEPS = 8, 4


def uneven_batches(seed=0):
    """Global batches of 8 whose first half (replica 0) holds long targets and
    second half (replica 1) short ones: very different token counts."""
    return concatenated(reversal_batches([GLOBAL_BATCH] * STEPS, seed))


def child(output_dir):
    # Before anything runs a TensorFlow op.
    from keras_transformer.training.distribute import mirrored_strategy

    strategy = mirrored_strategy(2)
    import keras
    import tensorflow as tf

    from keras_transformer.training import LabelSmoothedCrossEntropy

    assert strategy.num_replicas_in_sync == 2, strategy.extended.worker_devices
    x, y = uneven_batches()

    def build(scope):
        with scope:
            return tiny_transformer()

    reference = build(tf.distribute.get_strategy().scope())  # default: one device
    initial_weights = reference.get_weights()
    mirrored = build(strategy.scope())
    mirrored.set_weights(initial_weights)

    results = {}
    # The loss itself, per replica, at the initial weights: each replica's
    # value is its token sum over the global token count, so the replica
    # values add up to the global token mean. Keras' own masked loss gives a
    # per-replica mean divided by the replica count (a mean of means).
    first_x = {k: v[:GLOBAL_BATCH] for k, v in x.items()}
    first_y = y[:GLOBAL_BATCH]
    ours = LabelSmoothedCrossEntropy()
    builtin = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD)
    dataset = tf.data.Dataset.from_tensor_slices((first_x, first_y)).batch(GLOBAL_BATCH)
    distributed = strategy.experimental_distribute_dataset(dataset)

    @tf.function
    def replica_losses(batch):
        def on_replica(inputs, labels):
            logits = mirrored(inputs, training=False)
            return ours(labels, logits), builtin(labels, logits), tf.reduce_sum(
                tf.cast(labels != PAD, tf.float32)
            )

        return strategy.run(on_replica, args=batch)

    per_replica = replica_losses(next(iter(distributed)))
    results["replica_values"] = [
        [float(v) for v in strategy.experimental_local_results(values)] for values in per_replica
    ]
    results["global_ours"] = float(ours(first_y, reference(first_x, training=False)))
    results["global_builtin"] = float(
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD)(
            first_y, reference(first_x, training=False)
        )
    )

    class StepLosses(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.values = []

        def on_train_batch_end(self, batch, logs=None):
            self.values.append([float(logs["loss"]), float(logs["masked_accuracy"])])

    for name, model in (("one_device", reference), ("two_replicas", mirrored)):
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
        steps = StepLosses()
        model.fit(data, epochs=2, verbose=0, callbacks=[steps])
        results[name] = {"step_logs": steps.values}
        np.savez(os.path.join(output_dir, f"{name}.npz"), *model.get_weights())
        results[name]["logits"] = model(first_x, training=False).numpy().tolist()
    results["weight_paths"] = [v.path for v in reference.weights]
    np.savez(os.path.join(output_dir, "initial.npz"), *initial_weights)

    # Resuming under the strategy: a fresh, unbuilt model (whose optimizer
    # variables the restore has to create in the strategy's scope) continues
    # from the checkpoint of the first run.
    from keras_transformer.training import fit_resumable

    batches = lambda start: tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat().skip(start)
    checkpoints = os.path.join(output_dir, "checkpoints")
    for epochs in (1, 2):
        with strategy.scope():
            resumed = tiny_transformer()
        fit_resumable(resumed, batches, epochs=epochs, steps_per_epoch=STEPS, checkpoint_dir=checkpoints,
                      save_every_steps=STEPS, verbose=0)
    results["resumed_iterations"] = int(resumed.optimizer.iterations.numpy())
    with open(os.path.join(output_dir, "results.json"), "w") as handle:
        json.dump(results, handle)


def run_child(tmp_path):
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run(
        [sys.executable, os.path.abspath(__file__), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]
    with open(tmp_path / "results.json") as handle:
        results = json.load(handle)
    load = lambda name: load_arrays(tmp_path / f"{name}.npz")
    return results, load


def test_two_replicas_match_one_device_with_uneven_token_counts(tmp_path):
    results, load = run_child(tmp_path)

    ours, builtin, tokens = results["replica_values"]
    assert tokens[0] > 3 * tokens[1]  # the replicas really are uneven
    # Our loss: the replica values add up to the one-device global token mean.
    np.testing.assert_allclose(sum(ours), results["global_ours"], rtol=1e-5)
    # Keras' masked loss does not (this is what the global normalisation fixes).
    assert abs(sum(builtin) - results["global_builtin"]) > 0.01 * results["global_builtin"]

    assert results["resumed_iterations"] == 2 * STEPS  # restored at STEPS, then STEPS more

    one, two = results["one_device"]["step_logs"], results["two_replicas"]["step_logs"]
    assert len(one) == len(two) == 2 * STEPS
    # Reported running loss and masked accuracy, step by step.
    np.testing.assert_allclose(np.array(two), np.array(one), rtol=2e-4, atol=1e-5)
    initial, one_weights, two_weights = load("initial"), load("one_device"), load("two_replicas")
    moved = max(float(np.abs(a - b).max()) for a, b in zip(one_weights, initial))
    assert moved > 0.05  # 8 Adam updates with a high learning rate
    # A key projection's bias has an identically zero gradient (softmax does
    # not change when every score of a query moves by the same q.b), so Adam
    # with epsilon 1e-9 moves it by lr-sized steps of rounding noise: it
    # differs between any two runs and cannot change the outputs. Skip it.
    compared = [
        (path, a, b)
        for path, a, b in zip(results["weight_paths"], one_weights, two_weights)
        if not path.endswith("key/bias")
    ]
    assert len(compared) >= len(one_weights) - 3
    bad = [(path, float(np.abs(a - b).max())) for path, a, b in compared
           if not np.allclose(b, a, rtol=1e-3, atol=2e-4)]
    assert not bad, bad
    np.testing.assert_allclose(
        np.array(results["two_replicas"]["logits"]), np.array(results["one_device"]["logits"]),
        rtol=1e-3, atol=1e-3,
    )


if __name__ == "__main__":
    child(sys.argv[1])
