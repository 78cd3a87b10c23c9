"""A KerasHub preset folder from a trained run (`keras-transformer export --format keras-hub`)."""

import os
import shutil
import tempfile

from keras_transformer._folders import replace_folder


def save_run_preset(run_dir, preset_dir, force=False, decoding=None):
    """Writes the run's model, tokenizer and decoding settings as a preset
    that `keras_hub.models.Seq2SeqLM.from_preset(preset_dir)` loads:
    `generate` then translates as `keras-transformer translate RUN_DIR`
    (the run's `decoding` section, sources cut at its `data.max_length`).

    The folder is written beside `preset_dir` and renamed into place: a
    failure leaves nothing half-written. An existing non-empty `preset_dir`
    is refused unless `force`. `decoding` overrides settings of the run's
    `decoding` section (as the command's decoding flags do). Returns
    `preset_dir`.
    """
    from keras_transformer.hub.seq2seq_lm import TransformerSeq2SeqLM
    from keras_transformer.run.trained import load_run

    preset_dir = os.path.abspath(os.fspath(preset_dir))
    if os.path.isdir(preset_dir) and os.listdir(preset_dir) and not force:
        raise FileExistsError(f"{preset_dir} exists and is not empty (pass force=True, or --force, to replace it).")
    model, tokenizer, config = load_run(run_dir)
    max_length = config["data"]["max_length"]
    task = TransformerSeq2SeqLM.from_transformer(
        model, tokenizer, decoding={**config["decoding"], **(decoding or {})}, max_source_length=max_length,
        encoder_sequence_length=max_length, decoder_sequence_length=max_length,
    )
    parent = os.path.dirname(preset_dir)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".keras-hub-", dir=parent)
    try:
        task.save_to_preset(staging)
        replace_folder(staging, preset_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return preset_dir
