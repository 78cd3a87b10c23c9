"""The rows of the paper's Table 3 (model variations), scaled to any base model.

The paper varies its base model (N 6, d_model 512, d_ff 2048, h 8,
d_k = d_v = 64, P_drop 0.1, eps_ls 0.1, sinusoids) one group at a time:

  (A) h = 1, 4, 16, 32 with d_k = d_v = d_model / h (the work per layer stays);
  (B) d_k = 16, 32 (a quarter and half of the base's 64), h and d_v kept;
  (C) N = 2, 4, 8; d_model = 256, 1024 (h kept, d_k = d_v = d_model / h);
      d_ff = 1024, 4096;
  (D) P_drop = 0.0, 0.2; eps_ls = 0.0, 0.2;
  (E) learned positional embeddings instead of sinusoids.

`table3_rows(base)` builds the same rows around `base` (the resolved `model`
and `training` sections of the sweep's configuration): the same head counts
(A), d_k a quarter and a half of the base's (B), N = round(base N x 2/6, 4/6, 8/6), at least 1 (the paper's 2, 4, 8
against its 6; a row equal to the base or to an earlier row is dropped),
d_model and d_ff halved and doubled (C), and the paper's (D) and (E) values.
A row whose d_model does not divide into its heads is dropped, and named in
the `dropped` list, rather than changed.
"""

BASE = "base"


def _model_value(base, key):
    from keras_transformer.models.presets import PRESETS

    model = base["model"]
    value = model.get(key)
    if value is None:
        value = PRESETS[model["preset"]][key]
    return value


def describe(config):
    """The Table 3 columns of a resolved configuration."""
    model, training = config["model"], config["training"]
    d_model, heads = _model_value(config, "d_model"), _model_value(config, "num_heads")
    encoder, decoder = _model_value(config, "num_encoder_layers"), _model_value(config, "num_decoder_layers")
    return {
        "N": encoder if encoder == decoder else f"{encoder}/{decoder}",
        "d_model": d_model,
        "d_ff": _model_value(config, "d_ff"),
        "h": heads,
        "d_k": model.get("key_dim") or d_model // heads,
        "d_v": d_model // heads,
        "P_drop": _model_value(config, "dropout"),
        "eps_ls": training["label_smoothing"],
        "positions": "learned" if model["positional_encoding"] == "learned" else "sinusoid",
    }


def table3_rows(base):
    """(rows, dropped): rows is a list of (name, group, overrides) with the base
    first; overrides are --set style "key=value" strings; dropped is a list of
    (name, reason)."""
    d_model, heads = _model_value(base, "d_model"), _model_value(base, "num_heads")
    depth = _model_value(base, "num_encoder_layers")
    d_ff = _model_value(base, "d_ff")
    d_k = base["model"].get("key_dim") or d_model // heads
    candidates = [(BASE, "base", [])]
    for index, h in enumerate((1, 4, 16, 32), start=1):
        candidates.append((f"A{index}", "A", [f"model.num_heads={h}"]))
    for index, key_dim in enumerate((max(1, d_k // 4), max(1, d_k // 2)), start=1):
        candidates.append((f"B{index}", "B", [f"model.key_dim={key_dim}"]))
    for index, paper_n in enumerate((2, 4, 8), start=1):
        n = max(1, round(depth * paper_n / 6))
        candidates.append((f"C{index}", "C", [f"model.num_encoder_layers={n}", f"model.num_decoder_layers={n}"]))
    candidates += [
        ("C4", "C", [f"model.d_model={d_model // 2}"]),
        ("C5", "C", [f"model.d_model={d_model * 2}"]),
        ("C6", "C", [f"model.d_ff={d_ff // 2}"]),
        ("C7", "C", [f"model.d_ff={d_ff * 2}"]),
        ("D1", "D", ["model.dropout=0.0"]),
        ("D2", "D", ["model.dropout=0.2"]),
        ("D3", "D", ["training.label_smoothing=0.0"]),
        ("D4", "D", ["training.label_smoothing=0.2"]),
        ("E", "E", ["model.positional_encoding=learned"]),
    ]
    rows, dropped, seen = [], [], set()
    for name, group, overrides in candidates:
        settings = dict(assignment.split("=", 1) for assignment in overrides)
        row_d_model = int(settings.get("model.d_model", d_model))
        row_heads = int(settings.get("model.num_heads", heads))
        if row_d_model < 1 or row_d_model % row_heads:
            dropped.append((name, f"d_model {row_d_model} does not divide into {row_heads} heads"))
            continue
        key = tuple(sorted(settings.items()))
        if name != BASE and _same_as_base(base, settings):
            dropped.append((name, "the same as the base row"))
            continue
        if key in seen:
            dropped.append((name, "the same as an earlier row"))
            continue
        seen.add(key)
        rows.append((name, group, overrides))
    return rows, dropped


def _same_as_base(base, settings):
    for assignment_key, value in settings.items():
        section, key = assignment_key.split(".", 1)
        current = base[section].get(key)
        if section == "model" and current is None and key != "key_dim":
            current = _model_value(base, key)
        if str(current) != value and not _equal_numbers(current, value):
            return False
    return True


def _equal_numbers(current, value):
    try:
        return float(current) == float(value)
    except (TypeError, ValueError):
        return False
