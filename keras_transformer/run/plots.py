"""A run's pictures (matplotlib, written to PNG): its model's encoder-decoder attention heatmaps
(`keras-transformer attention`) and its training curves from `progress.jsonl` (`keras-transformer plot`)."""

import numpy as np


def cross_attention_weights(model, tokenizer, source_text, target_text, layer=-1):
    """Cross-attention of one decoder layer for a sentence pair.

    Returns `(weights, source_pieces, target_pieces)` where weights has shape
    (heads, target_tokens, source_tokens): row t is what the decoder looked at
    when it predicted target token t (the decoder input is BOS + target).
    """
    import keras

    source_ids = [int(i) for i in np.asarray(tokenizer.tokenize(source_text))] + [tokenizer.eos_id]
    target_ids = [int(i) for i in np.asarray(getattr(tokenizer, "tokenize_target", tokenizer.tokenize)(target_text))] + [tokenizer.eos_id]
    source = np.array([source_ids], dtype="int32")
    decoder_input = np.array([[tokenizer.bos_id] + target_ids[:-1]], dtype="int32")
    memory = model.encode(source)
    _, weights = model.decode(decoder_input, memory, source, return_attention_weights=True)
    weights = keras.ops.convert_to_numpy(weights)[layer, 0]
    return (
        weights,
        [getattr(tokenizer, "source_id_to_piece", tokenizer.id_to_piece)(i) for i in source_ids],
        [tokenizer.id_to_piece(i) for i in target_ids],
    )


def plot_cross_attention(model, tokenizer, source_text, target_text, path, layer=-1):
    """Writes one heatmap panel per head (source tokens across, target tokens down) to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    weights, source_pieces, target_pieces = cross_attention_weights(
        model, tokenizer, source_text, target_text, layer
    )
    heads = weights.shape[0]
    columns = min(heads, 4)
    rows = (heads + columns - 1) // columns
    cell = 0.35
    width = max(4.0, columns * (1.5 + cell * len(source_pieces)))
    height = max(3.0, rows * (1.5 + cell * len(target_pieces)))
    figure, axes = plt.subplots(rows, columns, figsize=(width, height), squeeze=False)
    for head in range(rows * columns):
        axis = axes[head // columns][head % columns]
        if head >= heads:
            axis.axis("off")
            continue
        axis.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axis.set_title(f"head {head + 1}")
        axis.set_xticks(range(len(source_pieces)))
        axis.set_xticklabels(source_pieces, rotation=90, fontsize=8)
        axis.set_yticks(range(len(target_pieces)))
        axis.set_yticklabels(target_pieces, fontsize=8)
    layer_name = "last" if layer == -1 else str(layer)
    figure.suptitle(f"encoder-decoder attention, decoder layer {layer_name}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def plot_training_curves(run_dir, path):
    """Loss, validation loss, validation BLEU/chrF and learning rate against
    step, from the run's own records (`progress.jsonl`), as one PNG.

    Raises FileNotFoundError naming the file when the run has no records.
    """
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from keras_transformer.training.progress import PROGRESS_FILE, read_records

    records_path = os.path.join(os.fspath(run_dir), PROGRESS_FILE)
    records = read_records(records_path)
    if not records:
        raise FileNotFoundError(f"{records_path}: no training records (train with this version first).")

    def series(key):
        points = sorted((r["step"], r[key]) for r in records if r.get(key) is not None)
        return [s for s, _ in points], [v for _, v in points]

    panels = [
        ("loss", [("loss", "training"), ("val_loss", "validation")]),
        ("validation translation", [("valid_bleu", "BLEU"), ("valid_chrf", "chrF")]),
        ("learning rate", [("learning_rate", None)]),
        ("target tokens / s", [("tokens_per_second", None)]),
    ]
    figure, axes = plt.subplots(2, 2, figsize=(10, 7))
    for axis, (title, lines) in zip(axes.flat, panels):
        drawn = False
        for key, label in lines:
            steps, values = series(key)
            if steps:
                axis.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=label)
                drawn = True
        axis.set_title(title)
        axis.set_xlabel("step")
        if not drawn:
            axis.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=axis.transAxes)
        elif any(label for _, label in lines):
            axis.legend()
    figure.suptitle(os.path.basename(os.path.normpath(os.fspath(run_dir))))
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
