"""What each `keras-transformer` command does, given its parsed arguments.

`keras_transformer.cli` builds the parser and dispatches to these functions
(its docstring lists the commands); each returns the process's exit status.
"""

import json
import os
import sys


def _apply_decoding(config, args):
    from keras_transformer import config as config_lib

    return config_lib.merge(config, {"decoding": _decoding_overrides(args)}, origin="decoding flags")


def _resolve(args):
    from keras_transformer import config as config_lib

    assignments = list(args.assignments)
    if args.output_dir:
        assignments.append(f"output_dir={args.output_dir}")
    if args.train:
        assignments.append(f"data.train={args.train}")
    if getattr(args, "init_from", None):
        assignments.append(f"training.init_from={args.init_from}")
    if getattr(args, "init_optimizer", None):
        assignments.append(f"training.init_optimizer={args.init_optimizer}")
    return config_lib.resolve(args.config, args.preset, assignments)


def cmd_train(args):
    from keras_transformer.run.train import train

    config = _resolve(args)
    if args.print_config:
        print(json.dumps(config, indent=2))
        return 0
    output_dir = train(config)
    print(f"done: {output_dir}")
    return 0


def cmd_prepare(args):
    from keras_transformer.run.data import prepare

    prepared = prepare(_resolve(args), verify=args.verify)
    counts = prepared.manifest["counts"]
    print(f"{prepared.action}: {prepared.directory}: {counts['pairs']:,} pairs, {counts['tokens']:,} tokens in "
          f"{len(prepared.manifest['shards'])} shards")
    return 0


def _decoding_overrides(args):
    keys = ("beam_size", "alpha", "max_extra_length", "batch_size", "limit_rule", "length_penalty",
            "target_language")
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def cmd_evaluate(args):
    from keras_transformer.run.trained import evaluate

    result, samples = evaluate(
        args.run_dir, args.corpus, args.corpus_target, limit=args.limit,
        decoding=_decoding_overrides(args),
    )
    for source, hypothesis, reference in samples:
        print(f"SRC {source}\nHYP {hypothesis}\nREF {reference}\n")
    print(f"{result['sentences']} sentences: BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}  "
          f"exact match {100 * result['exact_match']:.1f}%")
    print(f"signature: {result.get('bleu_signature', '')}")
    _report_truncated(result["truncated_sources"], result["sentences"], args.run_dir)
    return 0


def _report_truncated(count, total, run_dir):
    if count:
        print(f"{count} of {total} sources were longer than the run's data.max_length tokens "
              f"(EOS included) and were translated from their first part ({run_dir}/config.json)",
              file=sys.stderr)


def _read_text_file(path, name):
    """Lines of a UTF-8 file (stdin for None), or an error naming the file and line."""
    try:
        data = open(path, "rb").read() if path else sys.stdin.buffer.read()
    except OSError as error:
        raise SystemExit(f"error: {name} {path}: {error.strerror}")
    lines = []
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise SystemExit(f"error: {name} {path or '(stdin)'} line {number}: not UTF-8 "
                             f"({error.reason} at byte {error.start})")
    return lines


def _uses_toolkit(args):
    return bool(args.n_best or args.scores or args.alignments or args.prefix or args.format == "jsonl"
                or args.search or args.no_repeat_ngram_size or args.shortlist)


def _translation_records(args, translator, texts, prefixes):
    """One list of dicts per text (n-best: several, best first)."""
    results = translator.translate(
        texts, n_best=args.n_best or 1, prefixes=prefixes, return_alignments=args.alignments,
    )
    records = []
    for index, hypotheses in enumerate(results):
        rows = []
        for rank, hypothesis in enumerate(hypotheses):
            row = {"index": index, "rank": rank, "translation": hypothesis.translation,
                   "score": round(float(hypothesis.score), 6), "log_prob": round(float(hypothesis.log_prob), 6),
                   "truncated": bool(hypothesis.truncated)}
            if args.alignments:
                row["alignment"] = hypothesis.alignment
            rows.append(row)
        records.append(rows)
    return records


def _format_record(args, row, source):
    """A line: JSON, or fields joined by " ||| " (fairseq's and Moses' n-best convention)."""
    if args.format == "jsonl":
        return json.dumps(dict(row, source=source), ensure_ascii=False)
    fields = [str(row["index"])] if args.n_best else []
    fields.append(row["translation"])
    if args.scores or args.n_best:
        fields += [f"{row['score']:.6f}", f"{row['log_prob']:.6f}"]
    if args.alignments:
        fields.append(row["alignment"])
    return " ||| ".join(fields) if len(fields) > 1 else fields[0]


def _load_run(run_dir):
    """`run.trained.load_run`: the one place where the commands that use the model they load (translate,
    score, attention) load it; tests/tf/run_memo.py memoizes this function for tests that run many commands."""
    from keras_transformer.run.trained import load_run

    return load_run(run_dir)


def cmd_translate(args):
    from keras_transformer.run.translate import make_translator, translate_texts

    if args.text:
        texts = list(args.text)
    else:
        texts = _read_text_file(args.input, "--input")
    prefixes = None
    if args.prefix:
        prefixes = _read_text_file(args.prefix, "--prefix")
        if len(prefixes) != len(texts):
            source = args.input or "--text"
            raise SystemExit(f"error: --prefix {args.prefix} has {len(prefixes)} lines but {source} has "
                             f"{len(texts)}: one prefix (or an empty line) per source")
    model, tokenizer, config = _load_run(args.run_dir)
    config = _apply_decoding(config, args)
    truncated = []
    if _uses_toolkit(args):
        options = {"no_repeat_ngram_size": args.no_repeat_ngram_size or 0}
        if args.search:
            options["search"] = args.search
        if args.search == "sampling":
            options.update(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
        try:
            if args.shortlist:
                from keras_transformer.decoding.shortlist import Shortlist

                options["shortlist"] = Shortlist.load(_existing_file(args.shortlist, "--shortlist"))
            translator = make_translator(
                model, tokenizer, config["decoding"], config["data"]["max_length"], **options
            )
            records = _translation_records(args, translator, texts, prefixes)
        except ValueError as error:
            raise SystemExit(f"error: {error}")
        truncated = translator.last_truncated
        lines = [_format_record(args, row, texts[row["index"]]) for rows in records for row in rows]
    else:
        lines = translate_texts(
            model, tokenizer, texts, config["decoding"], progress=len(texts) > 100,
            max_source_length=config["data"]["max_length"], truncated=truncated,
        )
    _report_truncated(len(truncated), len(texts), args.run_dir)
    _write_lines(args.output, lines)
    return 0


def _existing_file(path, option):
    if not os.path.isfile(path):
        raise SystemExit(f"error: {option} {path}: no such file")
    return path


def cmd_shortlist(args):
    from keras_transformer.run.shortlist import build_run_shortlist

    try:
        shortlist, path = build_run_shortlist(args.run_dir, args.output, per_source=args.per_source,
                                              frequent=args.frequent)
    except ValueError as error:
        raise SystemExit(f"error: {error}")
    print(f"{path}: {shortlist.table.shape[1]} target pieces per source piece, {len(shortlist.always)} always")
    return 0


def _write_lines(path, lines):
    out = open(path, "w", encoding="utf-8") if path else sys.stdout
    try:
        for line in lines:
            out.write(line + "\n")
    finally:
        if path:
            out.close()


def cmd_score(args):
    from keras_transformer.run.translate import make_translator

    sources = _read_text_file(args.source, "--source")
    targets = _read_text_file(args.target, "--target")
    if len(sources) != len(targets):
        raise SystemExit(f"error: --source {args.source} has {len(sources)} lines but --target "
                         f"{args.target} has {len(targets)}: they must pair line by line")
    model, tokenizer, config = _load_run(args.run_dir)
    config = _apply_decoding(config, args)
    translator = make_translator(model, tokenizer, config["decoding"], config["data"]["max_length"])
    results = translator.score(sources, targets, per_token=args.per_token)
    _report_truncated(len(translator.last_truncated), len(sources), args.run_dir)
    lines = []
    for index, result in enumerate(results):
        if args.format == "jsonl":
            lines.append(json.dumps(dict(index=index, **result)))
        else:
            fields = [f"{result['log_prob']:.6f}", str(result["tokens"]), f"{result['score']:.6f}"]
            if args.per_token:
                fields.append(" ".join(f"{value:.6f}" for value in result["token_log_probs"]))
            lines.append(" ||| ".join(fields))
    _write_lines(args.output, lines)
    return 0


def cmd_export(args):
    from keras_transformer.run.trained import export, export_ctranslate2

    if args.xla_min_rows is not None and not args.jit_compile:
        raise SystemExit("error: --xla-min-rows is the XLA variant's smallest row bucket: it needs --jit-compile")
    if args.xla_phase_buckets is not None and not args.jit_compile:
        raise SystemExit("error: --xla-phase-buckets is the XLA variant's: it needs --jit-compile (the plain "
                         "variant drops done sentences anyway)")
    if args.finer_phases and args.jit_compile:
        raise SystemExit("error: --finer-phases is the plain variant's: the XLA variant (--jit-compile) drops done "
                         "sentences in row buckets (--xla-phase-buckets)")
    if args.finer_phases and args.format != "saved_model":
        raise SystemExit("error: --finer-phases applies to --format saved_model only (its plain variant)")
    if args.format == "keras-hub":
        from keras_transformer.hub.presets import save_run_preset

        ignored = [flag for flag, value in (("--quantization", args.quantization), ("--quantize", args.quantize),
                                            ("--jit-compile", args.jit_compile), ("--shortlist", args.shortlist),
                                            ("--warmup-rows", args.warmup_rows)) if value]
        if ignored:
            raise SystemExit(f"error: {', '.join(ignored)} do not apply to --format keras-hub")
        try:
            path = save_run_preset(args.run_dir, args.output or os.path.join(args.run_dir, "export", "keras-hub"),
                                   force=args.force, decoding=_decoding_overrides(args))
        except FileExistsError as error:
            raise SystemExit(f"error: {error}")
        print(f"exported: {path}")
        return 0
    if args.format == "marian-hf":
        from keras_transformer.marian.run_export import export_marian_hf

        ignored = [flag for flag, value in (("--quantization", args.quantization), ("--quantize", args.quantize),
                                            ("--jit-compile", args.jit_compile), ("--shortlist", args.shortlist),
                                            ("--warmup-rows", args.warmup_rows),
                                            ("--target-language", getattr(args, "target_language", None)))
                   if value]
        if ignored:
            raise SystemExit(f"error: {', '.join(ignored)} do not apply to --format marian-hf (a multilingual "
                             "model's users put >>CODE<< in the text)")
        path = export_marian_hf(args.run_dir, args.output, force=args.force, decoding=_decoding_overrides(args))
        print(f"exported: {path}")
        return 0
    if args.format == "saved_model" and args.quantization is not None:
        raise SystemExit("error: --quantization applies to --format ctranslate2 only")
    if args.format == "ctranslate2" and args.jit_compile:
        raise SystemExit("error: --jit-compile applies to --format saved_model only")
    if args.format == "ctranslate2" and args.limit_rule not in (None, "finish"):
        raise SystemExit("error: a CTranslate2 export follows its engine's limit rule, finish: "
                         f"--limit-rule {args.limit_rule} applies to --format saved_model only")
    if args.format == "ctranslate2" and args.warmup_rows is not None:
        raise SystemExit("error: --warmup-rows applies to --format saved_model only")
    if args.format == "ctranslate2" and args.quantize == "bfloat16":
        raise SystemExit("error: --quantize bfloat16 is for --format saved_model; for CTranslate2 give "
                         "--quantization bfloat16 (the engine converts the float weights)")
    if args.format == "ctranslate2" and args.quantize and args.quantization not in (None, "int8"):
        raise SystemExit("error: --quantize gives int8 weights: export them with --quantization int8 (the default then)")
    if args.shortlist_size is not None and not (args.shortlist and args.jit_compile):
        raise SystemExit("error: --shortlist-size is the XLA variant's fixed list size: it needs --shortlist and "
                         "--jit-compile (the plain variant takes each request's list as it is)")
    if args.format == "ctranslate2" and args.shortlist:
        raise SystemExit("error: --shortlist applies to --format saved_model; CTranslate2 takes the same list as "
                         "its vmap.txt (Shortlist.ctranslate2_vmap, use_vmap=True)")
    if args.format == "ctranslate2":
        quantization = args.quantization or ("int8" if args.quantize else "float32")
        path = export_ctranslate2(args.run_dir, args.output, quantization=quantization,
                                  force=args.force, decoding=_decoding_overrides(args), quantize=args.quantize)
    else:
        path = export(args.run_dir, args.base_dir, name=args.name, version=args.version,
                      decoding=_decoding_overrides(args), jit_compile=args.jit_compile,
                      warmup_rows=args.warmup_rows, quantize=args.quantize,
                      shortlist=args.shortlist and _existing_file(args.shortlist, "--shortlist"),
                      shortlist_size=args.shortlist_size, xla_min_rows=args.xla_min_rows,
                      xla_phase_buckets=args.xla_phase_buckets, finer_phases=args.finer_phases)
        from keras_transformer.export.cpu_notes import serving_cpu_notes

        for note in serving_cpu_notes(args.quantize, args.jit_compile):
            print(f"note: {note}")
    print(f"exported: {path}")
    return 0


def cmd_average(args):
    import keras

    from keras_transformer.run.trained import load_model
    from keras_transformer.training import save_averaged_model

    if args.run:
        model = load_model(args.run)
    elif args.model:
        model = keras.saving.load_model(args.model)
    else:
        raise SystemExit("average-checkpoints: give --run RUN_DIR or --model FILE.keras "
                         "(the architecture the checkpoints belong to).")
    save_averaged_model(model, args.checkpoint_dir, args.output, last_n=args.last)
    print(f"averaged the last {args.last} checkpoints of {args.checkpoint_dir} -> {args.output}")
    return 0


def cmd_import(args):
    from keras_transformer.marian.run_import import IMPORT_FILE, import_marian

    run_dir = import_marian(args.source, args.run_dir, force=args.force)
    record = json.loads((run_dir / IMPORT_FILE).read_text())
    codes = record["language_codes"]
    print(f"imported: {args.source} -> {run_dir} (vocabulary {record['vocabulary_size']:,} ids"
          + (f"; target languages: {' '.join(codes)} (--target-language)" if codes else "") + ")")
    return 0


def cmd_attention(args):
    from keras_transformer.run.plots import plot_cross_attention
    from keras_transformer.run.translate import translate_texts, with_target_language

    model, tokenizer, config = _load_run(args.run_dir)
    config = _apply_decoding(config, args)
    tokenizer = with_target_language(tokenizer, config["decoding"])
    target = args.target
    if target is None:
        target = translate_texts(model, tokenizer, [args.text], config["decoding"],
                                 max_source_length=config["data"]["max_length"])[0]  # as translate cuts
    path = plot_cross_attention(model, tokenizer, args.text, target, args.output, layer=args.layer)
    print(f"{args.text}\n-> {target}\nattention heatmap: {path}")
    return 0


def cmd_plot(args):
    from keras_transformer.run.plots import plot_training_curves

    output = args.output or os.path.join(args.run_dir, "training_curves.png")
    print(f"training curves: {plot_training_curves(args.run_dir, output)}")
    return 0
