"""The table generators of benchmarks/report.py (its GENERATORS, by marker name) and what they share: each
turns the records of one benchmark (benchmarks/results/<name>.jsonl) into the Markdown that report.py puts
between a document's markers; the serving benchmarks' are in _report_serve.py. Medians are over the rounds of a record, and a ratio is the median of the ratios taken
within each round, not the ratio of the medians."""

import re
import statistics
import importlib
import math
from collections import OrderedDict

from benchmarks._harness import markdown_table
from benchmarks._workloads import (
    DENSE_BF16_PEAK_TFLOPS, PAPER_SECONDS_PER_STEP, PAPER_TARGET_TOKENS, gpu_size, training_flops
)

# --------------------------------------------------------------------------- records


def parse_options(text):
    """`commit=ABC time="2026-11-25 03:13:28"` -> {"commit": "ABC", "time": "2026-11-25 03:13:28"}."""
    options = {}
    for key, quoted, bare in re.findall(r'(\w+)=(?:"([^"]*)"|(\S+))', text):
        options[key] = quoted or bare
    return options


def select(records, options, what):
    """The records matching every option (commit, time, run, benchmark fields); the latest when none is given.

    A value may list alternatives separated by "|" (`run="A|B"`: the records of two invocations, e.g.
    seeds run in different sessions)."""
    matching = [r for r in records
                if all(str(r.get(key)) in value.split("|") for key, value in options.items())]
    if not matching:
        raise ValueError(f"{what}: no record matches {options or 'anything'}")
    return matching


def median_ratio(values, references):
    """Median over rounds of values[i] / references[i] (same-round ratios)."""
    return statistics.median(v / r for v, r in zip(values, references))


def machine_text(record):
    """The machine in words; "no AVX-512" after the CPU where its recorded flags say so (two CPUs
    of one name, AMD EPYC, rank the contenders differently with and without it)."""
    machine = record.get("machine", {})
    cpu = machine.get("cpu") or machine.get("processor")
    flags = (record.get("libraries") or {}).get("cpu_flags")
    if cpu and flags and "avx512f" not in flags:
        cpu += ", no AVX-512"
    return ", ".join([f"{machine.get('cpus')} CPUs" + (f" ({cpu})" if cpu else ""), *(machine.get("gpus") or [])])


def command_text(record):
    """The record's command, with TF_ENABLE_ONEDNN_OPTS in front where the record says it was set and
    the command (made before the harness wrote it there) does not."""
    command = record["command"]
    onednn = ((record.get("libraries") or {}).get("tensorflow_onednn") or {}).get("TF_ENABLE_ONEDNN_OPTS")
    if onednn and "TF_ENABLE_ONEDNN_OPTS=" not in command:
        command = f"TF_ENABLE_ONEDNN_OPTS={onednn} {command}"
    return command


def caption(record, what):
    """A table's caption: the record's command, commit, time, machine and load, then `what` the table shows."""
    load = record.get("load_average") or {}
    before, after = load.get("before"), load.get("after")
    load = f"load average {before[0]:.1f} before and {after[0]:.1f} after" if before and after else (
        "load average not recorded")
    return (f"`{command_text(record)}`, commit {record.get('commit') or 'unknown'}, {record.get('time')}, "
            f"{machine_text(record)}, {load} ({what}):")


# --------------------------------------------------------------------------- training throughput


def throughput_table(records, options):
    record = select(records, options, "table:train-throughput")[-1]
    workload = record["workload"]
    reference = record["reference"]
    floor = record["matmul_floor_tokens_per_s"]
    marked = set(record.get("floor_from_our_batches", []))
    rows = []
    for result in record["results"]:
        low, high = result["vs_reference_range"]
        bfloat16 = result["name"].endswith("-bf16")
        share = "-" if bfloat16 else f"{100 * result['tokens_per_s'] / floor:.0f}%"
        if result["name"] in marked and not bfloat16:
            share += " (our batches)"
        rates = result["tokens_per_s_by_round"]
        rows.append([result["name"], result.get("label", ""), f"{result['tokens_per_s']:.0f}",
                     f"{min(rates):.0f}-{max(rates):.0f}", f"{result['vs_reference']:.2f}x",
                     f"{low:.2f}-{high:.2f}x", share])
    header = ["contender", "what", "tokens/s (median)", "range", f"vs {reference}", "range", "% of matmul floor"]
    what = (f"{workload['kind']} workload, non-pad target tokens/s, medians of {workload['rounds']} rounds with "
            "the contenders taking turns; ratios are medians of same-round ratios")
    return caption(record, what) + "\n\n" + markdown_table(header, rows)


# --------------------------------------------------------------------------- time to quality


def quality_label(record):
    settings = record.get("settings", {})
    label = {"ours": "ours", "keras-hub": "KerasHub layers", "opennmt-tf": "OpenNMT-tf"}.get(
        record["contender"], record["contender"])
    # Records without an architecture are the keras-io architecture (the contender before 2026-11-26).
    if record["contender"] == "keras-hub" and settings.get("architecture") == "tied":
        label += ", like for like"
    if record["contender"] == "keras-hub" and settings.get("optimizer") == "stock":
        label += ", stock Adam"
    return label


def mean_and_range(values, digits=1):
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def quality_table(records, options):
    options = dict(options)
    if "run" not in options:  # the latest invocation
        runs = [r.get("run") for r in records if r.get("run")]
        if runs:
            options["run"] = runs[-1]
    chosen = select(records, options, "table:quality")
    groups = OrderedDict()  # (precision, label): records, in first-seen order
    for record in chosen:
        precision = record.get("settings", {}).get("mixed_precision") or "none"
        precision = "float32" if precision == "none" else precision
        groups.setdefault((precision, quality_label(record)), []).append(record)
    header = ["contender", "precision", "seeds", "steps (mean)", "minutes", "BLEU mean (range)", "chrF mean (range)"]
    main, extra = [], []
    for (precision, label), group in groups.items():
        row = [label, precision, " ".join(str(r.get("seed", 0)) for r in group),
               f"{statistics.mean(r['steps'] for r in group):.0f}",
               f"{statistics.mean(r['train_minutes'] for r in group):.1f}",
               mean_and_range([r["bleu"] for r in group]), mean_and_range([r["chrf"] for r in group])]
        (main if precision == "float32" else extra).append(row)
    invocations = OrderedDict((r.get("run"), r) for r in chosen).values()  # one line per invocation
    text = "; ".join(f"`{command_text(r)}`, commit {r.get('commit') or 'unknown'}, {r.get('date')}"
                     for r in invocations)
    text += (f", {machine_text(chosen[0])} (every contender in float32; mean and range over seeds):\n\n"
            + markdown_table(header, main))
    if extra:
        text += "\n\nExtra rows, other precision (not part of the comparison):\n\n" + markdown_table(header, extra)
    return text


# --------------------------------------------------------------------------- one GPU


def gpu_name(record):
    """The record's GPU model: `machine.gpus[0]`, or the first field of the older `machine.gpu` text."""
    machine = record.get("machine", {})
    gpus = machine.get("gpus") or [machine.get("gpu") or "unknown GPU"]
    return gpus[0].split(",")[0].strip()


def gpu_statistics(records):
    """Per (part, preset, batch, length, contender, precision): each run's figure (train: median seconds per
    step; decode: median seconds per batch over its rounds, not the best) with its entry, over every record given."""
    figures = OrderedDict()
    for record in records:
        for entry in record["results"]:
            if "seconds" not in entry:
                continue
            key = (entry["part"], entry["preset"], entry["batch"], entry.get("length"), entry["contender"],
                   entry["precision"])
            figures.setdefault(key, []).append((record["time"], statistics.median(entry["seconds"]), entry))
    return figures


def same_run_ratio(runs, peer_runs):
    """The median of a peer's figure over this one's, runs matched by their record's time ("-": none)."""
    peers = {time: seconds for time, seconds, _ in peer_runs}
    ratios = [peers[time] / seconds for time, seconds, _ in runs if time in peers]
    return f"{statistics.median(ratios):.2f}x" if ratios else "-"


def gpu_table(records, options):
    """One GPU model's runs (`gpu="H200"` picks the records whose GPU name contains it); rows per model,
    batch shape, contender and precision."""
    options = dict(options)
    wanted = options.pop("gpu", None)
    if wanted:
        records = [r for r in records if wanted in gpu_name(r)]
    records = select(records, options, "table:gpu")
    names = list(OrderedDict.fromkeys(gpu_name(r) for r in records))
    if len(names) > 1:
        raise ValueError(f"table:gpu: the records come from several GPUs ({', '.join(names)}); "
                         'pick one with gpu="..."')
    peak = records[-1].get("peak_tflops", DENSE_BF16_PEAK_TFLOPS)  # one GPU model, one peak
    figures = gpu_statistics(records)
    train_rows, decode_rows = [], []
    for (part, preset, batch, length, contender, precision), runs in figures.items():
        if part == "train":
            tokens = batch * length
            rates = [tokens / seconds for _, seconds, _ in runs]
            paper = PAPER_TARGET_TOKENS / PAPER_SECONDS_PER_STEP.get(preset, math.nan)  # base, big
            versus = [same_run_ratio(runs, figures.get((part, preset, batch, length, peer, precision), []))
                      if contender != peer else "-" for peer in ("torch.compile", "torch")]
            flops = training_flops(gpu_size(preset), batch, length, length)
            step = statistics.median(seconds for _, seconds, _ in runs)
            train_rows.append([
                preset, f"{batch} x {length}", contender, precision, f"{step * 1000:.1f}",
                f"{statistics.median(rates):,.0f}" + (f" ({min(rates):,.0f}-{max(rates):,.0f})" if min(rates) != max(rates) else ""),
                f"{statistics.median(rates) / paper:.2f}x",
                *versus,
                f"{flops / step / 1e12 / peak:.0%}", str(len(runs)),
            ])
        else:
            median = statistics.median(seconds for _, seconds, _ in runs)
            search = contender.split()[-1]  # greedy or beam4
            peer = figures.get((part, preset, batch, length, f"CTranslate2 {search}", "int8_float16"), [])
            decode_rows.append([preset, contender, precision, str(batch), f"{batch / median:,.0f}",
                                f"{median / runs[0][2]['steps'] * 1000:.2f}", same_run_ratio(runs, peer),
                                str(len(runs))])
    first, last = records[0], records[-1]
    gpus = last["machine"].get("gpus") or [last["machine"].get("gpu", "unknown GPU")]
    text = (f"{len(records)} invocations of `benchmarks/gpu.py` ({first['time']} to {last['time']}; commits "
            f"{', '.join(OrderedDict.fromkeys(str(r.get('commit')) for r in records))}; {gpus[0]}; "
            "records in `benchmarks/results/gpu.jsonl`). Training: target tokens per second from each run's "
            "median step time, the median over runs (range); ratios to torch (`torch.compile`, the fair contender, "
            "and eager, where a record has them) are medians of same-run ratios; "
            "the share is the step's matrix-product FLOPs against the GPU's dense bfloat16 peak.")
    text += "\n\n" + markdown_table(
        ["model", "batch (pairs x tokens)", "contender", "precision", "ms/step", "target tokens/s",
         "vs the paper's 8 P100s", "vs torch.compile, same precision", "vs torch eager, same precision",
         "of bf16 peak", "runs"], train_rows)
    text += ("\n\nDecoding (ours, `jax.jit`, and CTranslate2 where a record has it; sentences of 32 tokens, "
             "exactly the fixed number of tokens each; each run's median over its rounds, the median over runs; "
             "the ratio to CTranslate2 int8_float16 is the median of same-run ratios, same search):\n\n")
    text += markdown_table(["model", "search", "precision", "sources", "sentences/s", "ms per step",
                            "vs CTranslate2 int8_float16, same search", "runs"], decode_rows)
    return text


# --------------------------------------------------------------------------- large corpora


def data_scale_table(records, options):
    """data_scale.py: per corpus size, preparation, the first step, a resume and the input rate; the
    sizes of several invocations (`time="A|B"`) in one table."""
    chosen = select(records, options, "table:data-scale")
    results = sorted((result for record in chosen for result in record["results"]), key=lambda r: r["pairs"])
    smallest_rss = results[0]["train"]["peak_rss_mb"]
    rows = []
    for result in results:
        prepare, train, resume = result["prepare"], result["train"], result["resume"]
        rates = result["input_batches_per_second"]
        in_memory = rates.get("in-memory pipeline")
        rows.append([
            f"{result['pairs']:,}", f"{prepare['seconds'] / 60:.1f} min", f"{prepare['peak_rss_mb']:,.0f} MB",
            f"{train['seconds_to_first_step']:.0f} s", f"{train['peak_rss_mb']:,.0f} MB",
            f"{train['peak_rss_mb'] / smallest_rss:.2f}x",
            f"{resume['seconds_to_first_step']:.0f} s (step {resume['first_step_after_resume']})",
            f"{statistics.median(rates['prepared stream']):.0f}",
            "-" if in_memory is None else f"{statistics.median(in_memory):.0f}",
            "-" if in_memory is None else f"{median_ratio(rates['prepared stream'], in_memory):.1f}x",
        ])
    header = ["pairs", "prepare", "prepare peak RSS", "train: first step", "train peak RSS", "vs smallest",
              "killed after step " + str(results[0]["resume"]["killed_after_step"]) + ", resumed: first step",
              "stream batches/s", "in-memory batches/s", "stream vs in-memory"]
    what = (f"each command in its own process; train peak RSS over {results[0]['train']['steps']} steps; input "
            "rates are medians of rounds taking turns, same-round ratio")
    text = "\n".join(caption(record, what) for record in chosen) + "\n\n" + markdown_table(header, rows)
    if len(results) > 1:
        # Linear through the two largest sizes: the time that grows with the corpus (reading, tokenizing).
        (a, seconds_a), (b, seconds_b) = [(r["pairs"], r["prepare"]["seconds"]) for r in results[-2:]]
        hours = (seconds_b + (36_000_000 - b) * (seconds_b - seconds_a) / (b - a)) / 3600
        text += (f"\n\nPreparation time extrapolated linearly from the two largest sizes ({a:,} and {b:,} pairs) "
                 f"to 36 million pairs (WMT14 English-French): {hours:.1f} hours.")
    return text


def data_scale_cluster_table(records, options):
    """data_scale.py since the quick start check: per corpus size, the data's start and resume, the input
    rate of 25,000-token batches on one core, the batch plan's memory and the shards' writing time."""
    chosen = select(records, options, "table:data-scale-cluster")
    rows = []
    for result in (result for record in chosen for result in record["results"]):
        rates, memory = result["input_25k_batches_per_second"], result["plan_memory_mb"]
        start, shards = result["data_start_seconds"], result["prepare_shards_seconds"]
        rows.append([f"{result['pairs']:,}", f"{start['start']:.1f} s", f"{start['resume']:.1f} s",
                     f"{result['train']['seconds_to_first_step']:.0f} s",
                     f"{result['resume']['seconds_to_first_step']:.0f} s",
                     f"{statistics.median(rates['warm']):.0f}", f"{statistics.median(rates['cold']):.0f}",
                     f"{memory['1 replica']:.0f} MB", f"{memory['8 replicas, one plan']:.0f} MB",
                     f"{memory['8 replicas, a plan each (before)']:.0f} MB",
                     f"{shards['1'] / 60:.1f} min", f"{shards['2'] / 60:.1f} min"])
    header = ["pairs", "data: start", "data: resume (epoch 3)", "train: first step", "resumed: first step",
              "warm batches/s", "cold batches/s", "plan, 1 replica", "plan, 8 replicas", "8 plans (before)",
              "shards, 1 process", "shards, 2 processes"]
    what = ("data start: the size-and-time check, the plan and the first batch, in process; batches of 25,000 "
            "tokens on one core, medians of rounds; plan memory by tracemalloc")
    return "\n".join(caption(record, what) for record in chosen) + "\n\n" + markdown_table(header, rows)


# --------------------------------------------------------------------------- one record, one table


def record_table(marker, parts):
    """The generator of a table of the latest pinned record: `parts(record)` gives (what, header, rows[, align]);
    a module name for `parts` is a benchmark script's `table_parts` (quantize_quality.py, serve_mix.py: imported
    only when a table needs it, as they import more than the report)."""
    def table(records, options):
        record = select(records, options, f"table:{marker}")[-1]
        make = importlib.import_module(f"benchmarks.{parts}").table_parts if isinstance(parts, str) else parts
        what, header, rows, *align = make(record)
        return caption(record, what) + "\n\n" + markdown_table(header, rows, *align)
    return table


def recipe_parts(record):
    """A recipe's run (benchmarks/results/recipes.jsonl, written by hand from the recipe's output): its
    updates and its test split's scores."""
    test = record["test"]
    if "bleu" not in test:
        raise ValueError(f"table:recipe: the record of {record.get('time')} scores no single model (pin another)")
    row = [record["benchmark"], f"{record['steps']:,}", str(test["sentences"]), f"{test['bleu']:.1f}",
           f"{test['chrf']:.1f}"]
    return "sacreBLEU on the recipe's test split", ["recipe", "updates", "test sentences", "BLEU", "chrF"], [row]


def trip_parts(record):
    """recipes/opus_mt/trip.py's record (benchmarks/results/recipes.jsonl): domain B's scores before and
    after the same fine-tuning, of the native run and of its marian-hf export imported back."""
    if "trip" not in record:
        raise ValueError(f"table:recipe-trip (time {record.get('time')}): not a recipes/opus_mt/trip.py record")
    rows = []
    for key, label in (("native", "native (recipes/fine_tuning)"), ("trip", "exported, imported (recipes/opus_mt)")):
        before, after = record[key]["scores"]["new_before"], record[key]["scores"]["new_after"]
        rows.append([label, f"{before['bleu']:.1f}", f"{after['bleu']:.1f}", f"{after['bleu'] - before['bleu']:+.1f}",
                     f"{before['chrf']:.1f}", f"{after['chrf']:.1f}"])
    header = ["path", "BLEU before", "BLEU after", "gain", "chrF before", "chrF after"]
    return "sacreBLEU on domain B's test split", header, rows, ["---"] + ["---:"] * 5


def pretrained_reference(name, names):
    """The contender `name` of benchmarks/pretrained.py is compared with: the native model on the same path
    (in process), CTranslate2's conversion at the same precision (served); None for the references."""
    if name.startswith("imported, in process"):
        peer = name.replace("imported", "native base", 1)
    elif name.startswith("imported SavedModel"):
        peer = "CTranslate2 converter, " + name.rsplit(", ", 1)[1]
    else:
        return None
    return peer if peer in names else None


def pretrained_table(records, options):
    """benchmarks/pretrained.py: the import's time and peak memory, then each decoding contender's
    sentences/s, its time per search step and its same-round ratio to its reference."""
    record = select(records, options, "table:pretrained")[-1]
    workload = record["workload"]
    tables = []
    if record.get("imports"):
        rows = [[str(index), f"{run['seconds']:.1f}", f"{run['cpu_seconds']:.1f}", f"{run['peak_rss_mb']:,.0f}"]
                for index, run in enumerate(record["imports"], 1)]
        tables.append(caption(record, "`keras-transformer import` of the folder, a process of its own each run; "
                                      "goal: under 30 s and 2,000 MB") + "\n\n"
                      + markdown_table(["run", "seconds", "CPU seconds", "peak RSS, MB"], rows,
                                       ["---", "---:", "---:", "---:"]))
    if record.get("seconds"):
        rates = {name: [workload["batch"] / s for s in seconds] for name, seconds in record["seconds"].items()}
        cpu = record.get("cpu_seconds", {})
        rows = []
        for name, values in rates.items():
            reference = pretrained_reference(name, rates)
            ratio = f"{median_ratio(values, rates[reference]):.2f}x" if reference else "-"
            # CPU seconds: the peer's over this one's, so that above 1 is faster here too.
            cpu_ratio = "-"
            if reference in cpu and name in cpu:
                cpu_ratio = f"{median_ratio(cpu[reference], cpu[name]):.2f}x"
            step_ms = 1000 * statistics.median(record["seconds"][name]) / workload["steps"]
            rows.append([name, f"{statistics.median(values):.2f}", f"{step_ms:.0f}", ratio, cpu_ratio,
                         reference or "-"])
        rounds = len(next(iter(record["seconds"].values())))
        what = (f"random weights of opus-mt-en-de's shape, {workload['vocabulary']:,} pieces; {workload['batch']} "
                f"sources of {workload['source_tokens']} tokens, exactly {workload['steps']} generated tokens each, "
                f"beam {workload['beam_size']}, log P / length; {workload['threads']} threads; sentences/s and ms per "
                f"search step, medians of {rounds} rounds; ratios (of sentences/s; CPU: of the CPU seconds a call "
                f"took, the peer's over this one's) are medians of the same-round ratios")
        tables.append(caption(record, what) + "\n\n" + markdown_table(
            ["contender", "sentences/s", "ms per step", "ratio", "CPU ratio", "to"], rows,
            ["---", "---:", "---:", "---:", "---:", "---"]))
    return "\n\n".join(tables)


recipe_table = record_table("recipe", recipe_parts)
trip_table = record_table("recipe-trip", trip_parts)
quantize_quality_table = record_table("quantize-quality", "quantize_quality")
