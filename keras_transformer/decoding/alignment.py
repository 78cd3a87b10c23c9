"""Source-target alignments from cross-attention.

One teacher-forced pass of the decoder over BOS + each translation, with the
cross-attention weights returned: the target token at position t is aligned
with the source position its decoder query (at input position t, the one
that predicted it) attends to most, averaged over the heads of one layer
(the last by default). Source EOS and padding are never chosen. Mapping
token positions to words (`words_alignment`) is plain Python.
`keras.ops` only.
"""

import numpy as np
from keras import ops

from keras_transformer.decoding import compiled
from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID


def _align(model, source_ids, target_ids, layer, bos_id, eos_id, pad_id):
    source_ids = ops.cast(source_ids, "int32")
    target_ids = ops.cast(target_ids, "int32")
    rows = ops.shape(target_ids)[0]
    inputs = ops.concatenate([ops.full((rows, 1), bos_id, dtype="int32"), target_ids[:, :-1]], axis=1)
    memory = model.encode(source_ids, training=False)
    _, weights = model.decode(inputs, memory, source_ids, training=False, return_attention_weights=True)
    # (layers, batch, heads, target, source) -> (batch, target, source)
    weights = ops.mean(ops.cast(weights[layer], "float32"), axis=1)
    content = ops.logical_and(ops.not_equal(source_ids, pad_id), ops.not_equal(source_ids, eos_id))
    scores = ops.where(ops.expand_dims(content, 1), weights, -1.0)
    positions = ops.cast(ops.argmax(scores, axis=-1), "int32")
    positions = ops.where(ops.not_equal(target_ids, pad_id), positions, -1)
    return {"source_positions": positions, "weights": weights}


def attention_alignments(
    model, source_ids, target_ids, *, layer=-1, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID, compile=True
):
    """Which source position each target token attends to most.

    Args:
        model: a `keras_transformer.Transformer`.
        source_ids: (batch, source_length) ids, EOS included, pad-padded.
        target_ids: (batch, target_length) translation ids (no BOS; EOS may
            follow the tokens), pad-padded.
        layer: the decoder layer whose heads are averaged (-1: the last).

    Returns:
        A dict of tensors: "source_positions" (batch, target_length) int32,
        the source position of each target token (-1 at padding);
        "weights" (batch, target_length, source_length), the averaged
        attention.
    """
    if isinstance(layer, bool) or not isinstance(layer, int) or not -model.num_decoder_layers <= layer < model.num_decoder_layers:
        raise ValueError(
            f"`layer` must be an int in [-{model.num_decoder_layers}, {model.num_decoder_layers}), got {layer!r}."
        )
    target_ids = compiled.as_ids("target_ids", target_ids)

    def search(model, source_ids, target_ids):
        return _align(model, source_ids, target_ids, layer, bos_id, eos_id, pad_id)

    key = ("align", layer, bos_id, eos_id, pad_id)
    return compiled.run(model, source_ids, key, search, compile, False, (target_ids,))


def words_alignment(source_positions, source_word_of, target_word_of):
    """Token links -> Pharaoh word links "i-j" (source word i, target word j).

    `source_positions`: for each target token, its aligned source token
    position (-1: none); `source_word_of[p]` / `target_word_of[t]`: the word
    index of source token p / target token t (None for tokens that belong to
    no word, e.g. EOS). A target word links to the source word its tokens
    point at most often (ties to the first); each link appears once, sorted.
    """
    votes = {}
    for target_position, source_position in enumerate(np.asarray(source_positions).tolist()):
        if source_position < 0 or target_position >= len(target_word_of):
            continue
        target_word = target_word_of[target_position]
        source_word = source_word_of[source_position] if source_position < len(source_word_of) else None
        if target_word is None or source_word is None:
            continue
        counts = votes.setdefault(target_word, {})
        counts[source_word] = counts.get(source_word, 0) + 1
    links = []
    for target_word, counts in votes.items():
        best = max(counts.values())
        source_word = min(word for word, count in counts.items() if count == best)
        links.append((source_word, target_word))
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def _words_of(tokenizer, ids, eos_id, source=False):
    """Word index of each token (a piece starting with "▁" starts a word); None for EOS.
    `source`: the ids are a source's (a Marian tokenizer's sides may differ)."""
    id_to_piece = getattr(tokenizer, "source_id_to_piece", tokenizer.id_to_piece) if source else tokenizer.id_to_piece
    words, word = [], -1
    for token in ids:
        if token == eos_id:
            words.append(None)
            continue
        piece = id_to_piece(int(token))
        if piece.startswith("▁") or word < 0:
            word += 1
        words.append(word)
    return words


def translation_alignments(translator, sources, decoded):
    """Pharaoh word links for every hypothesis of `Translator.decode_ids`
    (`sources`: its source id lists, `decoded`: its hypotheses), batched
    by the translator's batch size."""
    model = translator.model
    pairs = [(row, k) for row, hypotheses in enumerate(decoded) for k in range(len(hypotheses))]
    results = [[None] * len(hypotheses) for hypotheses in decoded]
    table = model.max_length if getattr(model, "positional_encoding", None) == "learned" else None
    for start in range(0, len(pairs), translator.batch_size):
        chunk = pairs[start : start + translator.batch_size]
        source_batch = translator._padded(range(len(chunk)), [sources[row] for row, _ in chunk], 1)
        # The EOS after each translation, except where a learned position
        # table ends first: a hypothesis cut at that cap has no EOS, and its
        # alignment pass reads BOS + its tokens, no position beyond.
        target_lists = [(decoded[row][k][0] + [translator.eos_id])[:table] for row, k in chunk]
        target_batch = translator._padded(range(len(chunk)), target_lists, 1)
        positions = ops.convert_to_numpy(attention_alignments(
            model, source_batch, target_batch, bos_id=translator.bos_id, eos_id=translator.eos_id,
            pad_id=translator.pad_id,
        )["source_positions"])
        for position, (row, k) in enumerate(chunk):
            results[row][k] = words_alignment(
                positions[position], _words_of(translator.tokenizer, sources[row], translator.eos_id, source=True),
                _words_of(translator.tokenizer, target_lists[position], translator.eos_id),
            )
    return results
