"""`keras-transformer import`: a MarianMT / OPUS-MT model as an ordinary run directory.

The run directory it writes is what `load_run` reads (see
`keras_transformer.run`): `config.json` (the model section describes the
imported architecture; the decoding section takes the model's own beam size
and length penalty, under Marian's length rule),
`model.keras`, the tokenizer in `marian_tokenizer/` (Transformers'
MarianTokenizer layout: source.spm, target.spm, vocab.json; see
`keras_transformer.data.marian_tokenizer`) and `import.json` (where it came
from, the generation settings found). `translate`, `evaluate`, `score`,
`attention` and `export` take it as they take a trained run.

The run is written into a temporary folder beside RUN_DIR and renamed into
place: a failure leaves nothing half-written, and an existing non-empty
RUN_DIR is kept unless `force`.

TensorFlow-specific (the tokenizer); the model itself is backend-neutral.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

from keras_transformer._folders import replace_folder
from keras_transformer.run.data import MARIAN_TOKENIZER_DIR, RunError

IMPORT_FILE = "import.json"
HUB_PREFIX = "hf://"
# What a MarianMT folder on the Hub needs; never its pickles.
_HUB_PATTERNS = ("*.json", "*.spm", "model.safetensors", "tf_model.h5")
_TEMP_PREFIX = ".keras_transformer_import-"


def resolve_source(source):
    """The local folder of SOURCE: a path, or `hf://OWNER/NAME` downloaded with
    `huggingface_hub.snapshot_download` (safetensors, HDF5, JSON and .spm files only)."""
    source = os.fspath(source)
    if not source.startswith(HUB_PREFIX):
        folder = Path(source)
        if not folder.is_dir():
            raise RunError(f"{source}: no such folder (a MarianMT folder, an OPUS-MT release folder, or "
                           f"{HUB_PREFIX}OWNER/NAME)")
        return folder
    repo = source[len(HUB_PREFIX):].strip("/")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise RunError(f"{source}: expected {HUB_PREFIX}OWNER/NAME, e.g. {HUB_PREFIX}Helsinki-NLP/opus-mt-en-de")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise RunError(f"{source}: downloading needs huggingface_hub (pip install huggingface_hub); or download "
                       "the model folder yourself and give its path") from None
    try:
        return Path(snapshot_download(repo_id=repo, allow_patterns=list(_HUB_PATTERNS)))
    except Exception as error:  # offline, unknown repository, ...: the hub's own message says which
        raise RunError(f"{source}: the download failed ({type(error).__name__}: {error}); on a machine "
                       "without network, copy the model folder here and give its path") from None


def _opus_mt_vocabularies(folder):
    """(vocabulary, target vocabulary or None) of an OPUS-MT release: its
    `*.vocab.yml` files (named by decoder.yml's `vocabs`), with the `<pad>`
    that Transformers' converter (and checkpoint.py) appends."""
    import yaml

    decoder_path = folder / "decoder.yml"
    names = None
    if decoder_path.is_file():
        try:
            names = (yaml.safe_load(decoder_path.read_text(encoding="utf-8")) or {}).get("vocabs")
        except (yaml.YAMLError, AttributeError) as error:
            raise RunError(f"{decoder_path}: not a YAML mapping ({error})") from None
    if not names:
        names = sorted(path.name for path in folder.glob("*.vocab.yml"))
        if len(names) != 1:
            raise RunError(f"{folder}: {len(names)} *.vocab.yml files and no decoder.yml `vocabs` to say which")
        names = names * 2
    vocabularies = []
    for name in names[:2]:
        path = folder / name
        if not path.is_file():
            raise RunError(f"{path}: no such file (the vocabulary {decoder_path} names)")
        try:
            # BaseLoader: every piece stays a string (a piece "1" or "true" too).
            entries = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
            vocabulary = {str(piece): int(marian_id) for piece, marian_id in entries.items()}
        except (yaml.YAMLError, AttributeError, ValueError, TypeError) as error:
            raise RunError(f"{path}: not a Marian vocabulary (piece: id lines) ({error})") from None
        vocabulary.setdefault("<pad>", max(vocabulary.values(), default=-1) + 1)
        vocabularies.append(vocabulary)
    return vocabularies[0], (vocabularies[1] if names[1] != names[0] else None)


def marian_tokenizer(folder, source_ids=None, target_ids=None):
    """The `MarianTokenizer` of a MarianMT or OPUS-MT release folder, its
    vocabulary checked against the model's `MarianIds`."""
    from keras_transformer.data.marian_tokenizer import (
        SOURCE_SPM, TARGET_SPM, VOCAB_FILE, MarianTokenizer, MarianVocabularyError, read_spm,
    )

    folder = Path(folder)
    try:
        if (folder / VOCAB_FILE).is_file() or not list(folder.glob("*.vocab.yml")):
            tokenizer = MarianTokenizer.load(folder, source_ids=source_ids, target_ids=target_ids)
        else:
            vocabulary, target_vocabulary = _opus_mt_vocabularies(folder)
            source, target = read_spm(folder / SOURCE_SPM), read_spm(folder / TARGET_SPM)
            try:
                tokenizer = MarianTokenizer(source, target, vocabulary, target_vocabulary, source_ids=source_ids,
                                            target_ids=target_ids)
            except MarianVocabularyError as error:
                vocabs = ", ".join(path.name for path in folder.glob("*.vocab.yml"))
                raise MarianVocabularyError(f"{vocabs} ({error})") from None
    except MarianVocabularyError as error:
        message = str(error)
        if not message.startswith(str(folder)):
            message = str(folder / message)
        raise RunError(message) from None
    except FileNotFoundError as error:
        raise RunError(str(error)) from None
    return tokenizer


def _run_config(run_dir, marian, model):
    """The run's configuration: our defaults, with the imported architecture
    and the model's own beam size."""
    from keras_transformer import config as config_lib

    model_section = {
        "d_model": model.d_model, "num_heads": marian.num_heads, "d_ff": marian.ffn_dim,
        "num_encoder_layers": marian.encoder_layers, "num_decoder_layers": marian.decoder_layers,
        "dropout": float(marian.dropout), "attention_dropout": float(marian.attention_dropout),
        "activation": marian.activation, "norm_first": False, "positional_encoding": "sinusoidal",
        "sinusoid_layout": model.get_config().get("sinusoid_layout", "concatenated"),
        "layer_norm_epsilon": float(model.get_config().get("layer_norm_epsilon", 1e-5)), "output_bias": True,
    }
    # Marian and Transformers rank finished beams by log P / length ** length_penalty
    # (Transformers' default 1.0 where the folder gives none).
    decoding = {"length_penalty": "length",
                "alpha": 1.0 if marian.length_penalty is None else float(marian.length_penalty)}
    if marian.num_beams:
        decoding["beam_size"] = int(marian.num_beams)
    overrides = {"output_dir": str(run_dir), "model": model_section, "decoding": decoding,
                 # Transformers' MarianTokenizer's model_max_length.
                 "data": {"max_length": 512}}
    return config_lib.merge(config_lib.defaults(), overrides, origin="keras-transformer import")


def import_marian(source, run_dir, *, force=False):
    """Imports SOURCE (a MarianMT folder, an OPUS-MT release folder or
    `hf://OWNER/NAME`) as the run directory RUN_DIR; returns RUN_DIR (a Path)."""
    from keras_transformer.marian.checkpoint import CheckpointError, read_checkpoint
    from keras_transformer.marian.convert import transformer_from_checkpoint

    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunError(f"{run_dir}: exists and is not a directory")
    if run_dir.is_dir() and any(run_dir.iterdir()) and not force:
        raise RunError(f"{run_dir}: not empty; give a new RUN_DIR, or --force to replace it")
    folder = resolve_source(source)
    try:
        checkpoint = read_checkpoint(folder)
        model, info = transformer_from_checkpoint(checkpoint)
    except CheckpointError as error:
        raise RunError(str(error)) from None
    tokenizer = marian_tokenizer(folder, info["source_ids"], info["target_ids"])
    marian = info["config"]
    config = _run_config(run_dir, marian, model)
    parent = run_dir.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    temp_dir = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=parent))
    try:
        (temp_dir / "config.json").write_text(json.dumps(config, indent=2))
        tokenizer.save(temp_dir / MARIAN_TOKENIZER_DIR)
        model.save(str(temp_dir / "model.keras"))
        record = {
            "source": os.fspath(source), "folder": str(folder.resolve()), "weights_file": info["weights_file"],
            "generation": {"num_beams": marian.num_beams, "max_length": marian.max_length,
                           "length_penalty": marian.length_penalty},
            "vocabulary_size": tokenizer.vocabulary_size,
            "source_vocabulary_size": tokenizer.source_vocabulary_size,
            "separate_vocabularies": tokenizer.separate_vocabularies,
            "language_codes": tokenizer.language_codes,
        }
        (temp_dir / IMPORT_FILE).write_text(json.dumps(record, indent=2, ensure_ascii=False))
        replace_folder(temp_dir, run_dir)
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return run_dir
