"""JAX `keras.distribution.DataParallel` over two CPU devices follows one device.

JAX reads `XLA_FLAGS` when it starts, so the work runs in a fresh subprocess
(this file, run as a script) with two host-platform devices.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="keras.distribution is implemented for JAX only"
)

from reversal_task import LENGTH, concatenated, load_arrays, reversal_batches, tiny_transformer  # noqa: E402

GLOBAL_BATCH, STEPS = 8, 4


def uneven_batches(seed=0):
    """Global batches of 8 whose first half (device 0's shard) holds long
    targets and second half short ones, as one array of all rows."""
    return concatenated(reversal_batches([GLOBAL_BATCH] * STEPS, seed))


def child(output_dir):
    import jax

    from keras_transformer.training import LabelSmoothedCrossEntropy
    from keras_transformer.training.data_parallel import data_parallel

    label_shardings = []

    class ShardingProbe(LabelSmoothedCrossEntropy):
        """The same loss; records how the labels reach it inside the step."""

        def __call__(self, y_true, y_pred, sample_weight=None):
            jax.debug.inspect_array_sharding(y_true, callback=label_shardings.append)
            return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def build():
        return tiny_transformer(loss=ShardingProbe())

    def describe(shardings):
        # (number of devices, shape of one device's part) of a (8, 9) batch.
        return [[len(s.device_set), list(s.shard_shape((GLOBAL_BATCH, LENGTH + 1)))] for s in shardings]

    x, y = uneven_batches()
    results = {"devices": [str(d) for d in jax.devices()]}

    one_device = build()
    initial = one_device.get_weights()
    history = one_device.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0)
    results["one_device"] = {"logs": history.history, "labels": describe(label_shardings)}
    np.savez(os.path.join(output_dir, "one_device.npz"), *one_device.get_weights())

    label_shardings.clear()
    distribution = data_parallel(jax.devices())
    parallel = build()
    parallel.set_weights(initial)
    history = parallel.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0)
    kernel = parallel.trainable_variables[0].value
    results["parallel"] = {
        "logs": history.history,
        "labels": describe(label_shardings),
        "variable_devices": len(kernel.sharding.device_set),
        "variable_replicated": bool(kernel.sharding.is_fully_replicated),
        "mesh_shape": list(distribution.device_mesh.shape),
    }
    results["paths"] = [v.path for v in parallel.weights]
    np.savez(os.path.join(output_dir, "parallel.npz"), *parallel.get_weights())
    np.savez(os.path.join(output_dir, "initial.npz"), *initial)
    with open(os.path.join(output_dir, "results.json"), "w") as handle:
        json.dump(results, handle)


def test_data_parallel_over_two_cpu_devices_matches_one_device(tmp_path):
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        JAX_PLATFORMS="cpu",
    )
    completed = subprocess.run(
        [sys.executable, os.path.abspath(__file__), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]
    results = json.loads((tmp_path / "results.json").read_text())

    assert len(results["devices"]) == 2
    parallel = results["parallel"]
    assert parallel["mesh_shape"] == [2]
    # The labels reach the loss split over both devices, 4 rows each (whole,
    # on one device, without the distribution); the weights are replicated.
    assert parallel["labels"] and all(s == [2, [GLOBAL_BATCH // 2, LENGTH + 1]] for s in parallel["labels"])
    one_device_labels = results["one_device"]["labels"]
    assert one_device_labels and all(s == [1, [GLOBAL_BATCH, LENGTH + 1]] for s in one_device_labels)
    assert parallel["variable_devices"] == 2 and parallel["variable_replicated"]

    initial, one, two = (load_arrays(tmp_path / f"{name}.npz") for name in ("initial", "one_device", "parallel"))
    moved = max(float(np.abs(a - b).max()) for a, b in zip(one, initial))
    assert moved > 0.05  # 8 Adam updates with a high learning rate
    # A key projection's bias has an identically zero gradient (softmax is
    # unchanged when all scores of a query move by the same q.b): Adam with
    # epsilon 1e-9 moves it by rounding noise that changes no output. Skip it.
    compared = [(p, a, b) for p, a, b in zip(results["paths"], one, two) if not p.endswith("key/bias")]
    assert len(compared) >= len(one) - 3
    bad = [(p, float(np.abs(a - b).max())) for p, a, b in compared if not np.allclose(b, a, rtol=1e-5, atol=1e-4)]
    assert not bad, bad
    # The token-weighted accuracy and the loss are global: same logs.
    for key in ("loss", "masked_accuracy"):
        np.testing.assert_allclose(
            parallel["logs"][key], results["one_device"]["logs"][key], rtol=1e-4, atol=1e-6
        )


if __name__ == "__main__":
    child(sys.argv[1])
