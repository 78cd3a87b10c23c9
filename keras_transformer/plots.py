"""Encoder-decoder attention heatmaps (matplotlib, written to PNG)."""

import numpy as np


def cross_attention_weights(model, tokenizer, source_text, target_text, layer=-1):
    """Cross-attention of one decoder layer for a sentence pair.

    Returns `(weights, source_pieces, target_pieces)` where weights has shape
    (heads, target_tokens, source_tokens): row t is what the decoder looked at
    when it predicted target token t (the decoder input is BOS + target).
    """
    import keras

    source_ids = [int(i) for i in np.asarray(tokenizer.tokenize(source_text))] + [tokenizer.eos_id]
    target_ids = [int(i) for i in np.asarray(tokenizer.tokenize(target_text))] + [tokenizer.eos_id]
    source = np.array([source_ids], dtype="int32")
    decoder_input = np.array([[tokenizer.bos_id] + target_ids[:-1]], dtype="int32")
    memory = model.encode(source)
    _, weights = model.decode(decoder_input, memory, source, return_attention_weights=True)
    weights = keras.ops.convert_to_numpy(weights)[layer, 0]
    return (
        weights,
        [tokenizer.id_to_piece(i) for i in source_ids],
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
