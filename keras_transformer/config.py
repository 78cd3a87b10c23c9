"""Run configuration: defaults, the paper's presets, YAML/JSON files and flag overrides.

A configuration is a nested dict with four sections (`model`, `data`,
`training`, `decoding`) and `output_dir`. Every key has a default and a type;
a file or flag that names an unknown key, or gives a value of the wrong type,
is rejected with an error that names the key (and the file) and says what is
expected.
"""

import copy
import difflib
import json
from pathlib import Path

# key -> (default, type or tuple of allowed values, help)
SCHEMA = {
    "output_dir": ("runs/default", str, "directory for the tokenizer, checkpoints, logs, model and exports"),
    "model": {
        "preset": ("tiny", ("tiny", "base", "big"), "model size (paper, Table 3; tiny for CPUs)"),
        "d_model": (None, int, "override the preset's d_model"),
        "num_heads": (None, int, "override the preset's number of heads"),
        "key_dim": (None, int, "d_k, the width of each head's queries and keys (default d_model / num_heads; "
                    "d_v stays d_model / num_heads)"),
        "d_ff": (None, int, "override the preset's feed-forward width"),
        "num_encoder_layers": (None, int, "override the preset's encoder depth"),
        "num_decoder_layers": (None, int, "override the preset's decoder depth"),
        "dropout": (None, float, "override the preset's dropout"),
        "attention_dropout": (0.0, float, "dropout on attention weights"),
        "norm_first": (False, bool, "pre-LN instead of the paper's post-LN"),
        "positional_encoding": ("sinusoidal", ("sinusoidal", "learned"), "position scheme"),
        "sinusoid_layout": ("interleaved", ("interleaved", "concatenated"), "sinusoidal positions: sine and "
                            "cosine alternating (the paper) or the sines then the cosines (Marian, OPUS-MT)"),
        "activation": ("relu", ("relu", "gelu", "swish", "silu"), "feed-forward activation (paper: relu; gelu "
                       "is the exact erf form; swish and silu are one function, Marian's swish)"),
        "layer_norm_epsilon": (1e-6, float, "epsilon of every layer normalization (Marian: 1e-5)"),
        "output_bias": (False, bool, "a learned bias on the output logits (Marian's final_logits_bias)"),
    },
    "data": {
        "train": (None, str, "training corpus (.tsv, .jsonl[.gz], or the source side of a text pair)"),
        "train_target": (None, str, "target side when `train` is a plain-text source file"),
        "valid": (None, str, "validation corpus (same formats)"),
        "valid_target": (None, str, "target side of a plain-text validation pair"),
        "test": (None, str, "test corpus for `evaluate` (same formats)"),
        "test_target": (None, str, "target side of a plain-text test pair"),
        "source_key": ("en", str, "JSON lines: key of the source sentence"),
        "target_key": ("de", str, "JSON lines: key of the target sentence"),
        "max_chars": (1000, int, "pairs with a side longer than this are skipped"),
        "vocabulary_size": (8000, int, "joint subword vocabulary size"),
        "tokenizer_model_type": ("unigram", ("unigram", "bpe"), "SentencePiece model type"),
        "user_defined_symbols": (None, str, "space-separated strings the tokenizer keeps as one piece each "
                                 "(e.g. the tag <BT> of back-translated sources)"),
        "max_length": (128, int, "longest tokenized sentence used in training (longer pairs are dropped)"),
        "prepared_dir": (None, str, "where `keras-transformer prepare` (or the first `train`) writes the tokenizer "
                         "and the training corpus as shards of token ids (default: OUTPUT_DIR/prepared); several "
                         "runs may share one"),
        "tokenizer_sample_pairs": (500_000, int, "the tokenizer is trained on at most this many pairs, drawn "
                                   "uniformly while the corpus streams by"),
        "tokenizer_seed": (0, int, "seeds the tokenizer's sample and training (not training.seed: runs with "
                           "other seeds share one prepared_dir)"),
        "pairs_per_shard": (1_000_000, int, "sentence pairs per shard of the prepared corpus"),
        "prepare_processes": (1, int, "processes that tokenize and write shards side by side in `prepare` "
                              "(each with its share of the cores; the shards are the same)"),
        "bucket_width": (None, int, "batch lengths are padded to multiples of this (default: 1 without "
                         "XLA, else the geometric buckets 8, 16, 24, 32, 40, 48, 64, ...; a run with checkpoints "
                         "keeps the buckets it started with, recorded in checkpoints/plan.json)"),
    },
    "training": {
        "tokens_per_batch": (4096, int, "tokens per batch (paper: 25000 source + 25000 target)"),
        "gradient_accumulation_steps": (None, int, "apply one update every N batches"),
        "epochs": (10, int, "passes over the training data"),
        "max_steps": (None, int, "stop after this many steps (this run's: a fine-tuning run counts its own from 0)"),
        "worker_wait_minutes": (60.0, float, "on a cluster, how long the other workers wait for the chief to "
                                "prepare the data (they give up at once if the chief fails)"),
        "max_minutes": (None, float, "stop after this many minutes of training (on a cluster: the chief's "
                                           "clock; every worker stops at the step the chief does)"),
        "warmup_steps": (4000, int, "learning-rate warm-up steps (paper: 4000)"),
        "learning_rate_scale": (1.0, float, "factor on the paper's learning-rate schedule"),
        "label_smoothing": (0.1, float, "label smoothing (paper: 0.1)"),
        "save_every_steps": (1000, int, "checkpoint period in steps"),
        "keep_checkpoints": (5, int, "checkpoints kept on disk"),
        "average_last": (5, int, "average this many last checkpoints into the final model (paper: 5 base, 20 big; 1: no averaging)"),
        "mixed_precision": (None, ("mixed_bfloat16", "mixed_float16"), "mixed-precision policy"),
        "distribute": (False, bool, "MirroredStrategy over all visible GPUs"),
        "seed": (0, int, "random seed"),
        "progress_every_steps": (100, int, "a progress line (step, loss, tokens/s, lr, time left) every N steps"),
        "progress_every_seconds": (60.0, float, "... or every this many seconds, whichever comes first"),
        "validate_every_steps": (None, int, "translate the validation subset and log BLEU/chrF every N steps"),
        "validation_sentences": (200, int, "size of the fixed validation subset translated for BLEU/chrF"),
        "validation_beam_size": (1, int, "beam size of those translations (1: greedy, the fastest)"),
        "early_stopping_metric": ("bleu", ("bleu", "chrf"), "validation metric for the best model and early stopping"),
        "early_stopping_patience": (None, int, "stop after N validations without a gain (default: never)"),
        "early_stopping_min_delta": (0.0, float, "the least gain that counts as one"),
        "init_from": (None, str, "fine-tune: start from this run directory's model.keras and tokenizer (or "
                      "a .keras file with tokenizer.model beside it)"),
        "init_optimizer": ("reset", ("reset", "keep"), "with init_from: reset starts the optimizer and the "
                           "learning-rate schedule afresh (a new warm-up of training.warmup_steps); keep takes "
                           "the optimizer state (moments, iteration count) from the source run's newest "
                           "checkpoint, so the schedule continues where that run stopped"),
        "final_model": ("auto", ("auto", "best", "average"), "model.keras: the best validated weights "
                        "(auto: when validate_every_steps is set) or the average of the last checkpoints"),
    },
    "decoding": {
        "beam_size": (4, int, "beam size (paper: 4; 1 is greedy)"),
        "target_language": (None, str, "an imported multilingual Marian model: the target language code put "
                            "before every source (deu gives >>deu<<)"),
        "alpha": (0.6, float, "length penalty exponent (paper: 0.6)"),
        # The choices are keras_transformer.decoding.penalty.LENGTH_PENALTIES.
        "length_penalty": ("gnmt", ("gnmt", "length"),
                           "how beam search ranks finished translations: gnmt (log P / ((5 + |Y|) / 6) ** alpha, "
                           "the paper's) or length (log P / |Y| ** alpha, Marian's, Transformers' and CTranslate2's; "
                           "alpha 1.0 is the mean log-probability per token); |Y| counts EOS. `translate`, "
                           "`evaluate`, `score` and both exports use it"),
        "max_extra_length": (50, int, "output length limit = input length + this (paper: 50)"),
        "batch_size": (64, int, "sentences per decoding batch"),
        # The choices are keras_transformer.decoding.LIMIT_RULES (tests/tf/test_cli.py checks they agree).
        "limit_rule": ("fallback", ("fallback", "force_eos", "finish"),
                       "what becomes of a translation that reaches its length limit without EOS: fallback "
                       "(returned only when no hypothesis of its sentence ended; tensor2tensor's rule), force_eos "
                       "(only EOS may come at the last position; fairseq's) or finish (it competes as it is; "
                       "CTranslate2's rule, which a CTranslate2 export always follows). `translate`, `evaluate` "
                       "and the SavedModel export use it"),
    },
}

# Named run setups (`--preset`, or `preset:` at the top of a configuration
# file); the model sizes they name are `keras_transformer.models.PRESETS`.
RUN_PRESETS = {
    # The paper's base setup (section 5): 25k-token batches, 100k steps.
    "wmt14-base": {
        "model": {"preset": "base"},
        "data": {"vocabulary_size": 37000, "tokenizer_model_type": "bpe", "max_length": 256},
        "training": {"tokens_per_batch": 25000, "max_steps": 100000, "epochs": 1000,
                     "warmup_steps": 4000, "save_every_steps": 1000, "keep_checkpoints": 5,
                     "average_last": 5},
    },
    # The paper's big setup: 300k steps, average of the last 20 checkpoints.
    "wmt14-big": {
        "model": {"preset": "big"},
        "data": {"vocabulary_size": 37000, "tokenizer_model_type": "bpe", "max_length": 256},
        "training": {"tokens_per_batch": 25000, "max_steps": 300000, "epochs": 1000,
                     "warmup_steps": 4000, "save_every_steps": 1000, "keep_checkpoints": 20,
                     "average_last": 20},
    },
    # English-French (section 5, Table 3's notes): the same models, optimizer,
    # schedule, batches and steps, with a shared vocabulary of 32,000 word
    # pieces and, for the big model, dropout 0.1 instead of En-De's 0.3.
    # SentencePiece has no WordPiece trainer; BPE is the closest (both grow
    # the vocabulary by merging pieces; WordPiece picks merges by likelihood).
    "wmt14-en-fr-base": {
        "model": {"preset": "base"},
        "data": {"vocabulary_size": 32000, "tokenizer_model_type": "bpe", "max_length": 256,
                 "target_key": "fr"},
        "training": {"tokens_per_batch": 25000, "max_steps": 100000, "epochs": 1000,
                     "warmup_steps": 4000, "save_every_steps": 1000, "keep_checkpoints": 5,
                     "average_last": 5},
    },
    "wmt14-en-fr-big": {
        "model": {"preset": "big", "dropout": 0.1},
        "data": {"vocabulary_size": 32000, "tokenizer_model_type": "bpe", "max_length": 256,
                 "target_key": "fr"},
        "training": {"tokens_per_batch": 25000, "max_steps": 300000, "epochs": 1000,
                     "warmup_steps": 4000, "save_every_steps": 1000, "keep_checkpoints": 20,
                     "average_last": 20},
    },
    # English constituency parsing (section 6.3): sentences to linearised trees
    # (recipes/constituency_parsing). The paper: 4 layers, d_model 1024, a 16K
    # vocabulary on WSJ alone, beam 21, alpha 0.3, output <= input + 300.
    # The big model's other sizes (d_ff 4096, 16 heads, dropout 0.3) and the
    # En-De base schedule are ours: the paper tuned dropout and learning rate
    # on section 22 without reporting them.
    "wsj-parsing": {
        "model": {"preset": "big", "num_encoder_layers": 4, "num_decoder_layers": 4},
        "data": {"vocabulary_size": 16000, "tokenizer_model_type": "bpe", "max_length": 512,
                 "source_key": "en", "target_key": "tree"},
        "training": {"tokens_per_batch": 25000, "max_steps": 100000, "epochs": 1000,
                     "warmup_steps": 4000, "save_every_steps": 1000, "keep_checkpoints": 5,
                     "average_last": 5},
        "decoding": {"beam_size": 21, "alpha": 0.3, "max_extra_length": 300},
    },
}


class ConfigError(ValueError):
    """A configuration file or flag is invalid; the message names the key."""


def defaults():
    def fill(schema):
        return {k: fill(v) if isinstance(v, dict) else copy.deepcopy(v[0]) for k, v in schema.items()}

    return fill(SCHEMA)


def _suggest(key, choices):
    close = difflib.get_close_matches(key, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _coerce(dotted, value, spec, origin):
    default, kind, _ = spec
    where = f"{origin}: " if origin else ""
    if value is None:
        return None
    if isinstance(kind, tuple):
        if value not in kind:
            raise ConfigError(f"{where}'{dotted}' must be one of {list(kind)}, got {value!r}.")
        return value
    if kind is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        if not isinstance(value, bool):
            raise ConfigError(f"{where}'{dotted}' must be true or false, got {value!r}.")
        return value
    if kind is int:
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(f"{where}'{dotted}' must be an integer, got {value!r}.") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}'{dotted}' must be an integer, got {value!r}.")
        if value < 0 or (value == 0 and dotted.split(".")[-1] not in ("seed", "tokenizer_seed")):
            raise ConfigError(f"{where}'{dotted}' must be a positive integer, got {value!r}.")
        return value
    if kind is float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{where}'{dotted}' must be a number, got {value!r}.") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}'{dotted}' must be a number, got {value!r}.")
        if value < 0:
            raise ConfigError(f"{where}'{dotted}' must be >= 0, got {value!r}.")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where}'{dotted}' must be a string, got {value!r}.")
    return value


def merge(config, overrides, origin=""):
    """Returns `config` updated with the nested dict `overrides`, validated."""
    config = copy.deepcopy(config)

    def walk(target, schema, updates, prefix):
        if not isinstance(updates, dict):
            raise ConfigError(
                f"{origin + ': ' if origin else ''}'{prefix.rstrip('.') or 'config'}' must be a "
                f"mapping of keys, got {updates!r}."
            )
        for key, value in updates.items():
            dotted = prefix + str(key)
            if key not in schema:
                raise ConfigError(
                    f"{origin + ': ' if origin else ''}unknown key '{dotted}'"
                    f"{_suggest(str(key), schema)}; valid keys here: {sorted(schema)}."
                )
            if isinstance(schema[key], dict):
                walk(target[key], schema[key], value, dotted + ".")
            else:
                target[key] = _coerce(dotted, value, schema[key], origin)

    walk(config, SCHEMA, overrides, "")
    return config


def load_file(path):
    """Reads a YAML or JSON configuration file into a nested dict."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: configuration file not found.")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except (ValueError, Exception) as error:  # yaml.YAMLError, json.JSONDecodeError
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"{path}: cannot parse configuration: {error}") from None
    return {} if data is None else data


def parse_assignment(text):
    """'training.epochs=3' -> {'training': {'epochs': '3'}} (typed later by `merge`)."""
    if "=" not in text:
        raise ConfigError(f"--set expects KEY=VALUE (for example training.epochs=3), got {text!r}.")
    dotted, value = text.split("=", 1)
    parts = dotted.strip().split(".")
    result = node = {}
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = None if value.strip().lower() in ("none", "null") else value.strip()
    return result


def resolve(config_files=(), preset=None, assignments=(), base=None):
    """Defaults < preset < config files (in order; each after the run preset it
    names under a top-level `preset` key) < --set assignments."""
    config = defaults() if base is None else base
    if preset:
        config = _with_run_preset(config, preset, "unknown --preset")
    for path in config_files:
        data = load_file(path)
        if isinstance(data, dict) and "preset" in data:
            # A file may start from a named run setup and state only what differs.
            config = _with_run_preset(config, data.pop("preset"), f"{path}: unknown preset")
        config = merge(config, data, origin=str(path))
    for text in assignments:
        config = merge(config, parse_assignment(text), origin=f"--set {text}")
    return config


def _with_run_preset(config, preset, unknown):
    if preset not in RUN_PRESETS:
        raise ConfigError(f"{unknown} {preset!r}; choose one of {sorted(RUN_PRESETS)}.")
    return merge(config, RUN_PRESETS[preset], origin=f"preset {preset}")


def model_overrides(model_config):
    """The keyword arguments for `Transformer.from_preset` from the `model` section."""
    return {k: v for k, v in model_config.items() if k != "preset" and v is not None}
