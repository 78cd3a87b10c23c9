"""An imported OPUS-MT-sized model: import time and memory, decoding against a native model of the same
size, and served speed against CTranslate2's own conversion of the same folder (issue 48's goals). The
folder (opus-mt-en-de's shape, random weights, EOS row zero so every search runs to its limit), the
contenders and what each times: docs/benchmarks.md, "pretrained.py".

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/pretrained.py [--rounds 3] [--batch-size 8] [--xla]
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import _harness  # noqa: E402

# Helsinki-NLP/opus-mt-en-de's config.json (the facts the import reads).
OPUS_MT_EN_DE = dict(vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
                     encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                     decoder_ffn_dim=2048, activation_function="swish", max_position_embeddings=512,
                     pad_token_id=58100, eos_token_id=0, decoder_start_token_id=58100, forced_eos_token_id=0,
                     scale_embedding=True, share_encoder_decoder_embeddings=True, static_position_embeddings=True,
                     normalize_before=False, dropout=0.1, attention_dropout=0.0, activation_dropout=0.0)
ALPHA = 1.0  # Marian's and Transformers' length rule: log P / length


def build_folder(folder):
    """Writes the MarianMT folder (see the module docstring) unless `folder/DONE` says it is there."""
    if (folder / "DONE").is_file():
        return folder
    import io

    import sentencepiece
    import torch
    import transformers

    from benchmarks.serve import corpus_texts

    pairs, _ = corpus_texts(0, 5000)
    if not pairs:
        from keras_transformer.datasets.synthetic_en_de import generate_pairs
        pairs = generate_pairs(5000, seed=0)
    work = folder / "parts"
    work.mkdir(parents=True, exist_ok=True)
    pieces = []
    for side, name in ((0, "source.spm"), (1, "target.spm")):
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(pair[side] for pair in pairs), model_writer=model, vocab_size=4000,
            hard_vocab_limit=False, num_threads=1, minloglevel=2)
        (work / name).write_bytes(model.getvalue())
        processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())
                   if not (processor.is_control(i) or processor.is_unknown(i))]
    size = OPUS_MT_EN_DE["vocab_size"]
    vocabulary = {"</s>": 0, "<unk>": 1}
    for piece in pieces:
        vocabulary.setdefault(piece, len(vocabulary))
    for index in range(size - 1 - len(vocabulary)):  # filler pieces up to the real vocabulary's size
        vocabulary[f"\u2581filler{index}"] = len(vocabulary)
    vocabulary["<pad>"] = size - 1
    (work / "vocab.json").write_text(json.dumps(vocabulary))
    tokenizer = transformers.MarianTokenizer(str(work / "source.spm"), str(work / "target.spm"),
                                             str(work / "vocab.json"))
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(**OPUS_MT_EN_DE)).eval()
    with torch.no_grad():
        model.get_decoder().embed_tokens.weight[0] = 0.0  # EOS never wins: every search runs to its limit
    model.generation_config.update(num_beams=4, max_length=512, bad_words_ids=[[size - 1]])
    model.save_pretrained(str(folder))
    for part in work.iterdir():
        part.unlink()
    work.rmdir()
    (folder / "DONE").write_text("ok\n")
    return folder


def time_import(folder, run_dir):
    """{seconds (wall), cpu_seconds (user + system), peak_rss_mb} of `keras-transformer import FOLDER RUN_DIR
    --force` in a child process of its own (its own rusage: the load of the machine inflates the wall time only)."""
    code = "import sys; from keras_transformer.cli import main; sys.exit(main())"
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", code, "import", str(folder), str(run_dir), "--force"], cwd=ROOT)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"keras-transformer import failed (exit {os.waitstatus_to_exitcode(status)})")
    return {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024}  # Linux: kilobytes


def sources_for(tokenizer, batch, length, seed=0):
    """`batch` rows of `length` of our ids (random ordinary pieces, EOS last) and the same rows as Marian
    pieces (CTranslate2's input: `</s>` last)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pieces = tokenizer.source_vocabulary()
    ordinary = [i for i, piece in enumerate(pieces) if i > 3 and not piece.startswith("<")]
    ids = rng.choice(ordinary, size=(batch, length)).astype("int32")
    ids[:, -1] = tokenizer.eos_id
    tokens = [[pieces[i] for i in row[:-1]] + ["</s>"] for row in ids.tolist()]
    return ids, tokens


def contenders(args, run_dir, folder, work):
    """{name: call} of every contender."""
    import keras
    import tensorflow as tf

    from keras_transformer import Transformer
    from keras_transformer.run import trained as trained_run
    from keras_transformer.decoding import beam_search

    model, tokenizer, _ = trained_run.load_run(run_dir)
    ids, tokens = sources_for(tokenizer, args.batch_size, args.source_tokens)
    extra = args.steps - args.source_tokens
    options = dict(beam_size=args.beam_size, alpha=ALPHA, length_penalty="length", max_extra_length=extra)
    calls = {}
    if "in-process" in args.parts:
        keras.utils.set_random_seed(0)
        native = Transformer.from_preset("base", vocabulary_size=model.vocabulary_size)
        embeddings = keras.ops.convert_to_numpy(native.target_embedding.embeddings).copy()
        embeddings[tokenizer.eos_id] = 0.0  # as the imported model's: EOS never wins
        native.target_embedding.embeddings.assign(embeddings)
        for xla in (False, True) if args.xla else (False,):
            for name, which in (("imported", model), ("native base", native)):
                calls[f"{name}, in process, {'XLA' if xla else 'plain graph'}"] = (
                    lambda which=which, xla=xla: keras.ops.convert_to_numpy(
                        beam_search(which, tf.constant(ids), jit_compile=xla, **options)["ids"]))
    if "served" in args.parts:
        decoding = dict(beam_size=args.beam_size, alpha=ALPHA, length_penalty="length", max_extra_length=extra)
        for variant in args.variants:
            for quantize in (None, "int8"):
                export_dir = trained_run.export(run_dir, os.path.join(work, f"export-{variant}-{quantize}"),
                                                decoding=decoding, quantize=quantize, warmup_rows=args.batch_size,
                                                jit_compile=variant == "XLA")
                signature = tf.saved_model.load(str(export_dir)).signatures["translate_ids"]
                calls[f"imported SavedModel {variant}, {quantize or 'float32'}"] = (
                    lambda signature=signature: signature(source_ids=tf.constant(ids))["ids"].numpy())
        import ctranslate2

        for quantization in ("float32", "int8"):
            out = os.path.join(work, f"ct2-{quantization}")
            ctranslate2.converters.TransformersConverter(str(folder)).convert(out, quantization=quantization)
            translator = ctranslate2.Translator(out, device="cpu", compute_type=quantization, inter_threads=1,
                                                intra_threads=os.cpu_count())
            ct2_options = dict(beam_size=args.beam_size, length_penalty=ALPHA, max_batch_size=len(tokens),
                               max_decoding_length=args.steps)
            calls[f"CTranslate2 converter, {quantization}"] = (
                lambda translator=translator, ct2_options=ct2_options: [
                    r.hypotheses[0] for r in translator.translate_batch(tokens, **ct2_options)])
    return calls


def parse_args(argv=None):
    parser = _harness.workload_options(_harness.parser(__doc__, "pretrained"), batch_size=8, source_tokens=16,
                                       steps=24, beam_size=4, rounds=3)
    parser.add_argument("--cache", default=os.path.expanduser(
                            "~/.cache/keras-transformer-benchmarks/opus-mt-en-de-random"),
                        help="where the MarianMT folder is built once (outside the repository)")
    parser.add_argument("--parts", type=_harness.comma_list(("import", "in-process", "served")),
                        default="import,in-process,served")
    parser.add_argument("--imports", type=int, default=2, help="import runs timed")
    parser.add_argument("--xla", action="store_true", help="also the in-process search compiled with XLA")
    parser.add_argument("--variants", type=_harness.comma_list(("plain", "XLA")), default="plain",
                        help="the SavedModel variants served")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    folder = build_folder(Path(args.cache))
    record = _harness.start("pretrained", argv, packages=("tensorflow", "keras", "ctranslate2", "transformers"))
    record["workload"] = {"vocabulary": OPUS_MT_EN_DE["vocab_size"], "folder": "MarianMTModel(config).save_pretrained, "
                          "random weights, EOS row zero", "batch": args.batch_size, "source_tokens": args.source_tokens,
                          "steps": args.steps, "beam_size": args.beam_size, "alpha": ALPHA, "rounds": args.rounds,
                          "threads": os.cpu_count()}
    with tempfile.TemporaryDirectory() as work:
        run_dir = Path(work) / "run"
        if "import" in args.parts or not run_dir.is_dir():
            record["imports"] = []
            for _ in range(args.imports if "import" in args.parts else 1):
                run = time_import(folder, run_dir)
                record["imports"].append(run)
                print(f"# import: {run['seconds']:.1f} s ({run['cpu_seconds']:.1f} CPU s), peak RSS "
                      f"{run['peak_rss_mb']:,.0f} MB", flush=True)
        if "import" not in args.parts:
            record.pop("imports")
        calls = contenders(args, run_dir, folder, work)
        record["seconds"], record["cpu_seconds"] = _harness.take_turns(calls, args.rounds, args.steps)
    _harness.finish(record)
    from benchmarks._report_tables import pretrained_table

    print("\n" + pretrained_table([record], {}) + "\n")
    _harness.save(args.record, record)


if __name__ == "__main__":
    main()
