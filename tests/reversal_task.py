"""The sequence-reversal task, shared by the tests that compare distributed
training with one device and by the word-alignment tests.

For distributed training, global batches that give the first rows (the first
replica's or worker's part) long targets and the rest short ones, so the
parts hold very different numbers of target tokens, and the tiny Transformer
those tests train. For alignments, pairs of mixed lengths whose true links
are known (reversed: the anti-diagonal; copied: the diagonal). A plain module, because the tests also run as scripts in
subprocesses.
"""

import numpy as np

PAD, BOS, EOS = 0, 1, 2
VOCABULARY_SIZE, LENGTH = 16, 8


def _write_row(arrays, row, symbols, reverse=True, source_eos=False):
    """Writes one pair into `(source, target, labels)`: the source symbols
    (then EOS when `source_eos`), BOS and the output as the decoder input,
    the output and EOS as labels; the output is the symbols reversed (or
    copied)."""
    source, target, labels = arrays
    length = len(symbols)
    output = symbols[::-1] if reverse else symbols
    source[row, :length] = symbols
    if source_eos:
        source[row, length] = EOS
    target[row, 0] = BOS
    target[row, 1 : length + 1] = output
    labels[row, :length] = output
    labels[row, length] = EOS


def reversal_batches(batch_sizes, seed=0):
    """`[(inputs, labels), ...]`, one global batch per size; in each, the first
    `(size + 1) // 2` rows have LENGTH symbols and the others 1 or 2."""
    rng = np.random.default_rng(seed)
    batches = []
    for size in batch_sizes:
        arrays = (np.zeros((size, LENGTH), "int32"), np.zeros((size, LENGTH + 1), "int32"),
                  np.zeros((size, LENGTH + 1), "int32"))
        for row in range(size):
            length = LENGTH if row < (size + 1) // 2 else int(rng.integers(1, 3))
            _write_row(arrays, row, rng.integers(3, VOCABULARY_SIZE, size=length))
        source, target, labels = arrays
        batches.append(({"source": source, "target": target}, labels))
    return batches


def reversal_pairs(count, seed=0, reverse=True, min_length=LENGTH // 2):
    """`(inputs, labels)` of `count` sentences of `min_length` to LENGTH
    symbols, each source ending in EOS (the training format of real text);
    the target reverses the source, or copies it with `reverse=False` (the
    two tasks whose true alignments are known: anti-diagonal and diagonal)."""
    rng = np.random.default_rng(seed)
    arrays = tuple(np.zeros((count, LENGTH + 1), "int32") for _ in range(3))
    for row in range(count):
        length = int(rng.integers(min_length, LENGTH + 1))
        _write_row(arrays, row, rng.integers(3, VOCABULARY_SIZE, size=length), reverse, source_eos=True)
    source, target, labels = arrays
    return {"source": source, "target": target}, labels


def concatenated(batches):
    """The batches as one `(inputs, labels)` of all their rows."""
    inputs = {key: np.concatenate([x[key] for x, _ in batches]) for key in batches[0][0]}
    return inputs, np.concatenate([y for _, y in batches])


def tiny_transformer(loss=None, seed=7):
    """A compiled 1+1-layer, d_model-32 Transformer with the same initial
    weights for the same seed; `loss` defaults to LabelSmoothedCrossEntropy()."""
    import keras

    from keras_transformer import Transformer
    from keras_transformer.training import LabelSmoothedCrossEntropy, MaskedAccuracy, paper_optimizer

    keras.utils.set_random_seed(seed)
    model = Transformer.from_preset(
        "tiny", vocabulary_size=VOCABULARY_SIZE, d_model=32, d_ff=64,
        num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
    )
    model.compile(
        optimizer=paper_optimizer(model.d_model, warmup_steps=2),
        loss=loss if loss is not None else LabelSmoothedCrossEntropy(),
        metrics=[MaskedAccuracy()],
    )
    return model


def load_arrays(path):
    """The arrays of an `np.savez(path, *arrays)` file, in their saved order."""
    with np.load(path) as archive:
        return [archive[f"arr_{index}"] for index in range(len(archive.files))]
