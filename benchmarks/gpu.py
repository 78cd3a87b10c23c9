"""The paper's models on one GPU: training throughput and decoding speed, with a peer in the same run.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `gpu.py`.

    KERAS_BACKEND=jax python benchmarks/gpu.py                 # everything
    KERAS_BACKEND=jax python benchmarks/gpu.py --part decode --ct2-compute-types float16 int8_float16
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks import _harness  # noqa: E402
from benchmarks._report_tables import gpu_table  # noqa: E402
from benchmarks._harness import timings  # noqa: E402
from benchmarks._workloads import (  # noqa: E402
    DENSE_BF16_PEAK_TFLOPS, PRESETS, VOCABULARY, compile_ours, gpu_size, make_batches, training_flops
)

PAD, BOS, EOS = 0, 2, 3
# The PyTorch contenders: name -> torch.compile mode (None: eager).
TORCH_MODES = {"torch.compile": "default", "torch.compile+cudagraphs": "reduce-overhead",
               "torch.compile-max-autotune": "max-autotune", "torch": None}
COMPILED = {}  # train_torch's count of the graphs torch.compile made, and of its graph breaks


def train_ours(args, precision):
    import jax
    import keras

    import keras_transformer as kt

    if precision == "mixed_bfloat16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    else:
        jax.config.update("jax_default_matmul_precision", "tensorfloat32")
    model = kt.Transformer.from_preset(args.preset, vocabulary_size=VOCABULARY)
    compile_ours(model, PRESETS[args.preset]["d_model"])
    data = make_batches(vocabulary=VOCABULARY, batch=args.batch, length=args.length, count=4)
    times = []
    for step in range(args.warmup + args.steps):
        source, target, labels = data[step % len(data)]
        start = time.perf_counter()
        model.train_on_batch({"source": source, "target": target}, labels)  # returns host values: synchronous
        times.append(time.perf_counter() - start)
    return times, int(model.count_params())


def train_torch(args, precision, mode=None):
    """Seconds of every step (warm-up first) of torch.nn.Transformer; `mode`: None runs eagerly, else the
    `torch.compile` mode of the forward and loss (whose backward AOTAutograd compiles too)."""
    import torch

    torch.manual_seed(0)
    torch.set_float32_matmul_precision("high")  # TF32 products, as JAX's default
    device = "cuda" if torch.cuda.is_available() else "cpu"
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    from benchmarks._contender_torch import torch_transformer

    model = torch_transformer(gpu_size(args.preset), positions=1024, padded=False, device=device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
    data = [tuple(torch.from_numpy(a).long().to(device) for a in batch) for batch in make_batches(
        vocabulary=VOCABULARY, batch=args.batch, length=args.length, count=4)]

    def forward_loss(source, target, labels):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "mixed_bfloat16"):
            logits = model(source, target)
            return loss_fn(logits.float().reshape(-1, VOCABULARY), labels.reshape(-1))

    if mode is not None:
        # Graph breaks allowed (what a user gets); the record counts the graphs compiled.
        forward_loss = torch.compile(forward_loss, mode=mode)
    cudagraphs = mode in ("reduce-overhead", "max-autotune")
    times = []
    for step in range(args.warmup + args.steps):
        source, target, labels = data[step % len(data)]
        synchronize()
        start = time.perf_counter()
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()  # a new step: the last step's graph outputs may be reused
        loss = forward_loss(source, target, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        synchronize()
        times.append(time.perf_counter() - start)
    if mode is not None:
        from torch._dynamo.utils import counters

        COMPILED["graphs"] = counters["stats"]["unique_graphs"]
        COMPILED["graph_breaks"] = sum(counters["graph_break"].values())
    return times, sum(t.numel() for t in model.parameters())


def decode_source(args):
    """`--decode-batch` random sources of 32 tokens, the last one EOS (as a tokenizer's sources end)."""
    import numpy as np

    source = np.random.default_rng(0).integers(4, VOCABULARY, (args.decode_batch, 32)).astype("int32")
    source[:, -1] = EOS
    return source


def decode_ours(args, precision, kind):
    import jax
    import keras
    import numpy as np

    import keras_transformer as kt
    from keras_transformer.decoding import beam_search, greedy_search

    if precision.startswith("mixed_"):
        keras.config.set_dtype_policy(precision)
    else:
        jax.config.update("jax_default_matmul_precision", "tensorfloat32")
    model = kt.Transformer.from_preset(args.preset, vocabulary_size=VOCABULARY)
    source = decode_source(args)
    fixed = dict(max_output_length=args.decode_steps, min_length=args.decode_steps)

    def run():
        if kind == "greedy":
            result = greedy_search(model, source, **fixed)
        else:
            result = beam_search(model, source, beam_size=4, alpha=0.6, **fixed)
        ids = np.asarray(result["ids"])  # to host: waits for the device
        return ids

    ids = run()  # compile
    assert (ids[:, : args.decode_steps] > EOS).all(), "every sentence must generate exactly the fixed length"
    return timings(run, args.decode_rounds), int(model.count_params())


def decode_ctranslate2(args, compute_type, kind):
    """CTranslate2 on the GPU with the weights ours would have (same seed), the same sources and length."""
    import tempfile

    import ctranslate2
    import keras

    import keras_transformer as kt
    from keras_transformer.export.ctranslate2 import model_spec
    from keras_transformer.data.special_tokens import BOS_PIECE, EOS_PIECE, PAD_PIECE, UNK_PIECE

    model = kt.Transformer.from_preset(args.preset, vocabulary_size=VOCABULARY)
    pieces = [PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE] + [f"p{i}" for i in range(4, VOCABULARY)]
    spec = model_spec(model, pieces=pieces)
    spec.validate()
    spec.optimize(quantization=None)  # float32 on disk; converted to `compute_type` at load
    directory = tempfile.mkdtemp(prefix="gpu-ct2-")
    spec.save(directory)
    del model
    keras.backend.clear_session()
    translator = ctranslate2.Translator(directory, device=args.ct2_device, compute_type=compute_type)
    tokens = [[pieces[t] for t in row[:-1]] for row in decode_source(args)]  # the engine appends EOS
    options = dict(beam_size=4 if kind == "beam4" else 1, length_penalty=0.6 if kind == "beam4" else 0.0,
                   min_decoding_length=args.decode_steps, max_decoding_length=args.decode_steps,
                   max_batch_size=len(tokens), suppress_sequences=[[PAD_PIECE], [BOS_PIECE]])

    def run():
        return translator.translate_batch(tokens, **options)

    results = run()  # warm-up
    lengths = {len(r.hypotheses[0]) for r in results}
    assert lengths == {args.decode_steps}, f"every sentence must generate exactly the fixed length: {lengths}"
    return timings(run, args.decode_rounds), len(pieces)


def worker(args):
    kind, contender, precision = args.worker.split(":")
    if kind == "train":
        if contender == "ours":
            times, parameters = train_ours(args, precision)
        else:
            times, parameters = train_torch(args, precision, TORCH_MODES[contender])
        warmup, times = times[:args.warmup], times[args.warmup:]
        mode = "XLA (jit)" if contender == "ours" else TORCH_MODES[contender] or "eager"
        result = {"seconds": times, "parameters": parameters, "warmup_seconds": warmup, "mode": mode, **COMPILED}
    elif kind == "decode-ct2":
        times, vocabulary = decode_ctranslate2(args, precision, contender)
        import ctranslate2

        result = {"seconds": times, "vocabulary": vocabulary, "ctranslate2": ctranslate2.__version__,
                  "device": args.ct2_device}
    else:
        times, parameters = decode_ours(args, precision, contender)
        result = {"seconds": times, "parameters": parameters}
    print("RESULT " + json.dumps(result), flush=True)


def run_worker(args, spec):
    command = [sys.executable, __file__, "--worker", spec] + [
        f"--{name.replace('_', '-')}={getattr(args, name)}"
        for name in ("preset", "batch", "length", "steps", "warmup", "decode_batch", "decode_steps",
                     "decode_rounds", "ct2_device")
    ]
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_PYTHON_CLIENT_MEM_FRACTION="0.9",
               TF_CPP_MIN_LOG_LEVEL="2")
    started = time.time()
    result = _harness.worker_result(command, timeout=args.worker_timeout, env=env, cwd=ROOT)
    if "error" not in result:
        result["process_seconds"] = round(time.time() - started, 1)
    return result


def main():
    parser = _harness.parser(__doc__, "gpu")
    parser.add_argument("--part", choices=("train", "decode", "all"), default="all")
    parser.add_argument("--presets", nargs="+", default=["base", "big"])
    parser.add_argument("--precisions", nargs="+", default=["float32", "mixed_bfloat16"])
    parser.add_argument("--contenders", nargs="+",
                        default=["ours", "torch.compile", "torch.compile+cudagraphs", "torch"],
                        choices=["ours", *TORCH_MODES],
                        help="training contenders (torch: eager; torch.compile-max-autotune is not run by default)")
    parser.add_argument("--batch", type=int, default=784, help="pairs per training batch")
    parser.add_argument("--length", type=int, default=32, help="source and target tokens per pair")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--decode-batch", type=int, default=128)
    parser.add_argument("--decode-steps", type=int, default=50)
    parser.add_argument("--decode-rounds", type=int, default=5)
    parser.add_argument("--decode-kinds", nargs="+", choices=("greedy", "beam4"), default=["greedy", "beam4"])
    parser.add_argument("--ct2-compute-types", nargs="*", default=[],
                        help="CTranslate2 contenders in decoding (e.g. float16 int8_float16); none by default")
    parser.add_argument("--ct2-device", default="cuda", help="CTranslate2's device (cpu for a dry run)")
    parser.add_argument("--peak-tflops", type=float, default=DENSE_BF16_PEAK_TFLOPS,
                        help="the GPU's dense bf16 peak (H100 SXM and H200: 989)")
    parser.add_argument("--worker-timeout", type=float, default=900,
                        help="seconds a contender's process may take (compile included)")
    parser.add_argument("--commit", help="the commit to record when the checkout is a copy without its git history")
    parser.add_argument("--preset", default="base", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    os.environ.setdefault("KERAS_BACKEND", "jax")  # named in the recorded command
    record = _harness.start("gpu", packages=("jax", "keras", "torch", "ctranslate2"))
    if args.commit:
        record["commit"] = args.commit
    record["results"] = []
    record["peak_tflops"] = args.peak_tflops
    print(f"GPU: {record['machine']['gpus']}; {record['versions']}", flush=True)
    for preset in args.presets:
        args.preset = preset
        workers = []  # (worker spec, the record entry's fields)
        if args.part in ("train", "all"):
            flops = training_flops(gpu_size(preset), args.batch, args.length, args.length)
            workers += [(f"train:{contender}:{precision}",
                         dict(part="train", contender=contender, precision=precision, batch=args.batch,
                              length=args.length, matmul_flops=flops))
                        for precision in args.precisions for contender in args.contenders]
        if args.part in ("decode", "all"):
            decode = dict(part="decode", batch=args.decode_batch, steps=args.decode_steps)
            workers += [(f"decode:{kind}:{precision}", dict(decode, contender=f"ours {kind}", precision=precision))
                        for precision in args.precisions for kind in args.decode_kinds]
            workers += [(f"decode-ct2:{kind}:{compute_type}",
                         dict(decode, contender=f"CTranslate2 {kind}", precision=compute_type))
                        for compute_type in args.ct2_compute_types for kind in args.decode_kinds]
        for spec, entry in workers:
            result = run_worker(args, spec)
            record["results"].append(dict(entry, preset=preset, **result))
            seconds = result.get("seconds")
            print(f"  {preset} {entry['contender']} {entry['precision']}: "
                  + (f"{statistics.median(seconds) * 1000:.1f} ms (median)" if seconds else f"failed: {result['error']}"),
                  flush=True)
    _harness.finish(record)
    print("\n" + gpu_table([record], {}) + "\n")  # the tables benchmarks/README.md shows, from this record
    _harness.save(args.record, record)


if __name__ == "__main__":
    main()
