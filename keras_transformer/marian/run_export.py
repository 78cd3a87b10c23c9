"""`keras-transformer export RUN --format marian-hf`: a run as a Transformers MarianMT folder.

The folder is what `MarianMTModel.from_pretrained` and
`MarianTokenizer.from_pretrained` read: the weights, `config.json` and
`generation_config.json` through `marian.convert.write_marian_hf`, and the
tokenizer files in the Marian id order of `marian.convert.export_ids` (our
BOS a real id, Transformers' `decoder_start_token_id`):

- a native run (one joint SentencePiece model): `source.spm` = `target.spm` =
  that model, `vocab.json` its pieces;
- an imported run (fine-tuned or not): its own two SentencePiece models and
  its vocabularies back (`target_vocab.json` too when they are separate), in
  the export's order (which differs from the original folder's: our BOS is
  an id of its own there).

The generation settings come from the run's decoding section: `num_beams`,
the length rule and `max_length`. Transformers ranks finished beams by
log P / length ** length_penalty, our `length` rule; with
`early_stopping="never"` its stopping bound is ours (the best live score at
the length limit). At `max_length` Transformers
forces EOS (`forced_eos_token_id`) at no cost, which no limit rule of ours
does: a run whose `limit_rule` is `finish` (a cut hypothesis competes as it
is) is written without the forced EOS, where Transformers' beam search then
gives ours (tests/tf/test_marian_hf_export.py); the other rules keep
Marian's forced EOS. One difference remains, rare: only an EOS among the
best `num_beams` of Transformers' `2 * num_beams` candidates finishes a
hypothesis, any of ours does (GNMT's and tensor2tensor's algorithm).

The paper's GNMT penalty has no Transformers equivalent: a run whose configuration says
`gnmt` (every native run's default) is written with Transformers' rule and
the same alpha, and says so (`GNMT_NOTE`); `gnmt` asked for explicitly
(`decoding={"length_penalty": "gnmt"}`, `--length-penalty gnmt`) is refused
unless alpha is 0, where both rules are 1. Transformers' length limit is
absolute (`max_length` tokens, the decoder start included); ours is the source length plus `max_extra_length`:
`max_length` is the longest source the run takes (`data.max_length`) plus
`max_extra_length` plus the start token.

The folder is written in a temporary folder beside DIR and renamed into
place; a non-empty DIR is refused unless `force`.
"""

import json
import shutil
import tempfile
import sys
from pathlib import Path

from keras_transformer.run.data import RunError

_TEMP_PREFIX = ".keras_transformer_marian_hf-"
# Transformers' MarianTokenizer's model_max_length and Marian's position table.
_MIN_POSITIONS = 512

GNMT_NOTE = ("the run ranks beams by GNMT's length penalty, which Transformers cannot express: "
             "generation_config.json gets Transformers' rule (log P / length ** length_penalty) with the same "
             "alpha; beam outputs may differ from the run's (export with --length-penalty length to match)")


def generation_settings(decoding, max_input_length, explicit_rule=None):
    """(Transformers generation settings, note or None) of a run's decoding
    section. `explicit_rule`: the length rule the caller asked for (refused
    if it is "gnmt" with alpha other than 0)."""
    alpha = float(decoding["alpha"])
    rule = explicit_rule or decoding["length_penalty"]
    note = None
    if rule == "gnmt" and alpha != 0.0:
        if explicit_rule == "gnmt":
            raise RunError("--length-penalty gnmt: Transformers has no GNMT length penalty; export with "
                           "--length-penalty length (Transformers' rule), or --alpha 0")
        note = GNMT_NOTE
    settings = {
        "num_beams": int(decoding["beam_size"]),
        "length_penalty": alpha,
        # Transformers' canonical beam search: the same stopping bound as ours.
        "early_stopping": "never",
        "max_length": int(max_input_length) + int(decoding["max_extra_length"]) + 1,
        "do_sample": False,
    }
    if decoding["limit_rule"] == "finish":
        settings["forced_eos_token_id"] = None
    return settings, note


def _tokenizer_files(model, tokenizer, source_ids, target_ids):
    """{file name: bytes} of the tokenizer in the export's Marian order."""
    from keras_transformer.data.marian_tokenizer import (
        CONFIG_FILE, SOURCE_SPM, TARGET_SPM, TARGET_VOCAB_FILE, VOCAB_FILE, MarianTokenizer,
    )

    def vocabulary(pieces, ids, origin):
        if len(pieces) != ids.our_size:
            raise RunError(f"{origin}: {len(pieces)} pieces, the model has {ids.our_size} ids")
        entries = {}
        for marian_id, our_id in enumerate(ids.ours_of_marian):
            piece = pieces[int(our_id)]
            if piece in entries:
                raise RunError(f"{origin}: the piece {piece!r} has two ids ({entries[piece]}, {marian_id}); "
                               "vocab.json cannot hold both")
            entries[piece] = marian_id
        return entries

    def json_bytes(value):
        return (json.dumps(value, ensure_ascii=False, indent=1) + "\n").encode("utf-8")

    separate = model.source_vocabulary_size is not None
    if isinstance(tokenizer, MarianTokenizer):
        source_proto, target_proto = tokenizer.source_proto, tokenizer.target_proto
        target_pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocabulary_size)]
        source_pieces = [tokenizer.source_id_to_piece(i) for i in range(tokenizer.source_vocabulary_size)]
        origin = "the run's marian_tokenizer"
    else:
        if separate:
            raise RunError("the model has separate source and target vocabularies, the tokenizer one joint "
                           "SentencePiece model: no Marian vocabulary fits both")
        source_proto = target_proto = tokenizer.proto
        target_pieces = source_pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocabulary_size)]
        origin = "the run's tokenizer.model"
    files = {SOURCE_SPM: source_proto, TARGET_SPM: target_proto,
             VOCAB_FILE: json_bytes(vocabulary(source_pieces, source_ids, origin))}
    if separate:
        files[TARGET_VOCAB_FILE] = json_bytes(vocabulary(target_pieces, target_ids, origin))
    files[CONFIG_FILE] = json_bytes({
        "tokenizer_class": "MarianTokenizer", "separate_vocabs": separate, "eos_token": "</s>",
        "unk_token": "<unk>", "pad_token": "<pad>", "model_max_length": _MIN_POSITIONS})
    return files


def export_marian_hf(run_dir, destination=None, *, force=False, decoding=None):
    """Writes the run RUN_DIR as a MarianMT folder (default RUN_DIR/export/marian-hf);
    returns its Path. `decoding` overrides the run's decoding settings."""
    from keras_transformer.marian.convert import export_ids, write_marian_hf
    from keras_transformer._folders import replace_folder
    from keras_transformer.run.trained import _with_decoding

    destination = Path(destination or Path(run_dir) / "export" / "marian-hf")
    if destination.exists() and not destination.is_dir():
        raise RunError(f"{destination}: exists and is not a directory")
    if destination.is_dir() and any(destination.iterdir()) and not force:
        raise RunError(f"{destination}: not empty; give a new --output, or --force to replace it")
    model, tokenizer, config = _with_decoding(run_dir, decoding)
    generation, note = generation_settings(config["decoding"], config["data"]["max_length"],
                                           (decoding or {}).get("length_penalty"))
    try:
        source_ids, target_ids = export_ids(model)
    except ValueError as error:
        raise RunError(f"{run_dir}: {error}") from None
    files = _tokenizer_files(model, tokenizer, source_ids, target_ids)
    parent = destination.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    temp_dir = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=parent))
    try:
        try:
            write_marian_hf(model, temp_dir, generation=generation,
                            max_position_embeddings=max(_MIN_POSITIONS, generation["max_length"]))
        except ValueError as error:
            raise RunError(f"{run_dir}: {error}") from None
        for name, data in files.items():
            (temp_dir / name).write_bytes(data)
        temp_dir.chmod(0o755 & ~_umask())
        replace_folder(temp_dir, destination)
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    if note:
        print(f"note: {note}", file=sys.stderr)
    return destination


def _umask():
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
