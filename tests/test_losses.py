"""LabelSmoothedCrossEntropy and MaskedAccuracy against independent references."""

import keras
import numpy as np
import pytest
import torch

import keras_transformer
from keras_transformer.training import LabelSmoothedCrossEntropy, MaskedAccuracy

PAD = 0


def random_batch(seed, batch=4, length=7, vocab=11, scale=3.0):
    rng = np.random.default_rng(seed)
    logits = (scale * rng.normal(size=(batch, length, vocab))).astype("float32")
    labels = rng.integers(1, vocab, size=(batch, length)).astype("int32")
    # Uneven padding: row i keeps i + 2 tokens (at least one row unpadded).
    for row in range(batch):
        labels[row, min(length, row + 2) :] = PAD
    labels[-1, :] = rng.integers(1, vocab, size=length)
    return labels, logits


def to_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def torch_reference(labels, logits, eps, sample_weight=None):
    # torch spreads eps over all V classes (target included), like the loss.
    per_token = torch.nn.functional.cross_entropy(
        torch.from_numpy(logits.astype("float64")).reshape(-1, logits.shape[-1]),
        torch.from_numpy(labels.astype("int64")).reshape(-1),
        ignore_index=PAD,
        label_smoothing=eps,
        reduction="none",
    ).numpy().reshape(labels.shape)
    weights = (labels != PAD).astype("float64")
    if sample_weight is not None:
        weights = weights * (sample_weight[:, None] if sample_weight.ndim == 1 else sample_weight)
    return (per_token * weights).sum() / weights.sum(), per_token


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_mean_matches_torch_cross_entropy_with_ignore_index(eps):
    labels, logits = random_batch(seed=1)
    loss = LabelSmoothedCrossEntropy(label_smoothing=eps)
    expected = torch.nn.functional.cross_entropy(
        torch.from_numpy(logits).reshape(-1, logits.shape[-1]),
        torch.from_numpy(labels.astype("int64")).reshape(-1),
        ignore_index=PAD,
        label_smoothing=eps,
    ).item()
    np.testing.assert_allclose(float(to_numpy(loss(labels, logits))), expected, rtol=1e-5)


def test_matches_keras_categorical_crossentropy_on_non_pad_tokens():
    labels, logits = random_batch(seed=2, vocab=13)
    keep = labels != PAD
    reference = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    one_hot = np.eye(13, dtype="float32")[labels[keep]]
    expected = float(to_numpy(reference(one_hot, logits[keep])))
    actual = float(to_numpy(LabelSmoothedCrossEntropy(0.1)(labels, logits)))
    np.testing.assert_allclose(actual, expected, rtol=1e-5)


def test_padding_positions_do_not_matter():
    labels, logits = random_batch(seed=3)
    changed = logits.copy()
    changed[labels == PAD] = np.random.default_rng(9).normal(size=changed[labels == PAD].shape) * 50
    loss = LabelSmoothedCrossEntropy()
    np.testing.assert_allclose(
        to_numpy(loss(labels, logits)), to_numpy(loss(labels, changed)), rtol=1e-6
    )
    per_token = to_numpy(LabelSmoothedCrossEntropy(reduction="none")(labels, changed))
    assert per_token.shape == labels.shape
    assert np.all(per_token[labels == PAD] == 0.0)


def test_reductions_and_sample_weights():
    labels, logits = random_batch(seed=4)
    eps = 0.1
    _, torch_per_token = torch_reference(labels, logits, eps)
    none = to_numpy(LabelSmoothedCrossEntropy(eps, reduction="none")(labels, logits))
    np.testing.assert_allclose(none, torch_per_token, rtol=1e-5, atol=1e-6)
    total = float(to_numpy(LabelSmoothedCrossEntropy(eps, reduction="sum")(labels, logits)))
    np.testing.assert_allclose(total, torch_per_token.sum(), rtol=1e-5)
    for weights in (
        np.array([1.0, 0.5, 2.0, 0.0], "float32"),
        np.random.default_rng(5).uniform(size=labels.shape).astype("float32"),
    ):
        expected, _ = torch_reference(labels, logits, eps, sample_weight=weights)
        actual = float(to_numpy(LabelSmoothedCrossEntropy(eps)(labels, logits, sample_weight=weights)))
        np.testing.assert_allclose(actual, expected, rtol=1e-5)


def test_token_mean_is_not_a_mean_of_sequence_means():
    # Normalisation by tokens: concatenating two batches with different token
    # counts gives the token-weighted mean, not the mean of the two means.
    labels_a, logits_a = random_batch(seed=6, batch=2)
    labels_b, logits_b = random_batch(seed=7, batch=4)
    loss = LabelSmoothedCrossEntropy()
    both = float(to_numpy(loss(np.concatenate([labels_a, labels_b]), np.concatenate([logits_a, logits_b]))))
    sum_a = float(to_numpy(LabelSmoothedCrossEntropy(reduction="sum")(labels_a, logits_a)))
    sum_b = float(to_numpy(LabelSmoothedCrossEntropy(reduction="sum")(labels_b, logits_b)))
    count = (labels_a != PAD).sum() + (labels_b != PAD).sum()
    np.testing.assert_allclose(both, (sum_a + sum_b) / count, rtol=1e-5)
    mean_of_means = 0.5 * (float(to_numpy(loss(labels_a, logits_a))) + float(to_numpy(loss(labels_b, logits_b))))
    assert abs(both - mean_of_means) > 1e-3


def test_all_padding_gives_zero_not_nan():
    labels = np.zeros((2, 3), "int32")
    logits = np.ones((2, 3, 5), "float32")
    assert float(to_numpy(LabelSmoothedCrossEntropy()(labels, logits))) == 0.0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_logits_are_computed_in_float32(dtype):
    labels, logits = random_batch(seed=8, vocab=40)
    logits = logits * 20.0  # large logits: a float16 softmax would overflow
    low = keras.ops.cast(logits, dtype)
    value = LabelSmoothedCrossEntropy()(labels, low)
    assert keras.backend.standardize_dtype(value.dtype) == "float32"
    rounded = to_numpy(keras.ops.cast(low, "float32"))
    expected, _ = torch_reference(labels, rounded, 0.1)
    np.testing.assert_allclose(float(to_numpy(value)), expected, rtol=1e-5)


def logits_gradient(loss_fn, labels, logits):
    """d loss / d logits under the current backend."""
    if keras.backend.backend() == "jax":
        import jax

        return to_numpy(jax.grad(lambda z: loss_fn(labels, z))(logits))
    if keras.backend.backend() == "torch":
        value_in = torch.tensor(logits, requires_grad=True)
        loss_fn(labels, value_in).backward()
        return to_numpy(value_in.grad)
    import tensorflow as tf

    logits_tensor = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits_tensor)
        value = loss_fn(labels, logits_tensor)
    return to_numpy(tape.gradient(value, logits_tensor))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradient_matches_torch_autograd(eps):
    labels, logits = random_batch(seed=12, vocab=17)
    grads = logits_gradient(LabelSmoothedCrossEntropy(eps), labels, logits)
    reference = torch.tensor(logits.astype("float64"), requires_grad=True)
    torch.nn.functional.cross_entropy(
        reference.reshape(-1, logits.shape[-1]),
        torch.from_numpy(labels.astype("int64")).reshape(-1),
        ignore_index=PAD,
        label_smoothing=eps,
    ).backward()
    np.testing.assert_allclose(grads, reference.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_gradient_is_stable_for_extreme_logits():
    labels, logits = random_batch(seed=10)
    logits = logits * 1e4
    logits_tensor = keras.Variable(logits)
    loss_fn = LabelSmoothedCrossEntropy()
    if keras.backend.backend() == "jax":
        import jax

        grads = jax.grad(lambda z: loss_fn(labels, z))(logits)
    elif keras.backend.backend() == "torch":
        value_in = torch.tensor(logits, requires_grad=True)
        loss_fn(labels, value_in).backward()
        grads = value_in.grad
    else:
        import tensorflow as tf

        with tf.GradientTape() as tape:
            value = loss_fn(labels, logits_tensor.value)
        grads = tape.gradient(value, logits_tensor.value)
    grads = to_numpy(grads)
    assert np.all(np.isfinite(grads))
    assert np.all(grads[labels == PAD] == 0.0)


def test_bad_shapes_and_arguments_are_reported():
    with pytest.raises(ValueError, match="y_pred"):
        LabelSmoothedCrossEntropy()(np.ones((2, 3), "int32"), np.ones((2, 3), "float32"))
    with pytest.raises(ValueError, match="y_true"):
        LabelSmoothedCrossEntropy()(np.ones((2,), "int32"), np.ones((2, 3, 4), "float32"))
    with pytest.raises(ValueError, match="label_smoothing"):
        LabelSmoothedCrossEntropy(label_smoothing=1.0)
    with pytest.raises(ValueError, match="reduction"):
        LabelSmoothedCrossEntropy(reduction="per_sequence")


def test_loss_and_metric_serialize():
    loss = LabelSmoothedCrossEntropy(label_smoothing=0.2, pad_id=3, reduction="sum", name="ls")
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(restored, LabelSmoothedCrossEntropy)
    assert restored.get_config() == loss.get_config()
    metric = MaskedAccuracy(pad_id=3, name="acc")
    restored_metric = keras.metrics.deserialize(keras.metrics.serialize(metric))
    assert isinstance(restored_metric, MaskedAccuracy)
    assert restored_metric.get_config() == metric.get_config()
    assert keras_transformer.LabelSmoothedCrossEntropy is LabelSmoothedCrossEntropy
    assert keras_transformer.MaskedAccuracy is MaskedAccuracy


def test_masked_accuracy_counts_non_pad_tokens_across_batches():
    metric = MaskedAccuracy()
    hits = counted = 0
    for seed in (11, 12):
        labels, logits = random_batch(seed=seed, vocab=5)
        metric.update_state(labels, logits)
        keep = labels != PAD
        hits += (logits.argmax(-1)[keep] == labels[keep]).sum()
        counted += keep.sum()
    np.testing.assert_allclose(float(to_numpy(metric.result())), hits / counted, rtol=1e-6)
    # Perfect predictions everywhere except at pads, where they are wrong.
    labels, _ = random_batch(seed=13, vocab=5)
    perfect = np.eye(5, dtype="float32")[np.where(labels == PAD, 1, labels)] * 10
    metric.reset_state()
    metric.update_state(labels, perfect)
    assert float(to_numpy(metric.result())) == 1.0
    metric.update_state(labels, perfect, sample_weight=np.zeros(labels.shape[0], "float32"))
    assert float(to_numpy(metric.result())) == 1.0


def test_compiled_model_with_loss_and_metric_round_trips(tmp_path):
    keras.utils.set_random_seed(3)
    vocab = 9
    model = keras.Sequential(
        [keras.Input((6,), dtype="int32"), keras.layers.Embedding(vocab, 8), keras.layers.Dense(vocab)]
    )
    model.compile(
        optimizer=keras_transformer.paper_optimizer(8, warmup_steps=5),
        loss=LabelSmoothedCrossEntropy(),
        metrics=[MaskedAccuracy()],
    )
    rng = np.random.default_rng(0)
    x = rng.integers(1, vocab, size=(8, 6)).astype("int32")
    y = np.where(rng.uniform(size=(8, 6)) < 0.3, 0, x).astype("int32")
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    logs = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    # Keras' reported loss is the loss itself (a full batch: one evaluation).
    expected = float(to_numpy(LabelSmoothedCrossEntropy()(y, model.predict(x, verbose=0))))
    np.testing.assert_allclose(logs["loss"], expected, rtol=1e-5)
    path = tmp_path / "m.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored.loss, LabelSmoothedCrossEntropy)
    restored_logs = restored.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    np.testing.assert_allclose(restored_logs["loss"], logs["loss"], rtol=1e-5)
    np.testing.assert_allclose(restored_logs["masked_accuracy"], logs["masked_accuracy"], rtol=1e-6)
