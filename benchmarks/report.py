"""Regenerates the benchmark tables and the figures quoted in prose (and the charts) from the committed records.

Every generated table sits between two marker comments in README.md or
benchmarks/README.md:

    <!-- table:serve commit=12a761a -->
    ... (generated; edits here are overwritten) ...
    <!-- /table -->

and every figure quoted in a sentence is one cell of such a table, between
inline markers:

    the XLA variant runs at <!-- cell:serve commit=95c4031 row="SavedModel XLA variant" column="vs ours XLA" -->1.02x<!-- /cell -->
    of our in-process search

(`row`: the cell's first column, or its first columns joined by " / ";
`column`: its header; `table=N`: the Nth table of a generator that writes
several; `number=N` keeps the Nth number of the cell, e.g. `number=2` of
"53.2 (1.02x)"). `--check` fails
when a table or a cell differs from what the records give, and when
README.md or benchmarks/README.md quotes a benchmark figure (a ratio such as
"1.4x", a rate in tokens/s or sentences/s, a BLEU or chrF score) outside a
marker.

The name after "table:" or "cell:" picks the generator (serve, serve-summary,
train-throughput, train-variants, train-profile, quality, gpu, complexity) and so the records
(benchmarks/results/<name>.jsonl). Every marker pins its records, so that a
new record changes no committed figure: `commit=ABC` (the record of that
commit), `time=...` (its start time, as written in the record) or `run=...`
(quality: the start of one invocation); `gpu=...` (gpu: every record of the
GPU model whose name contains it) only narrows a pinned choice. A marker
without one of the three is an error. Medians are over the rounds of that
record, and a ratio is the median of the ratios taken within each round
(contenders take turns, so a same-round ratio cancels the machine's drift),
not the ratio of the medians.

    python benchmarks/report.py            # rewrite the tables and cells in place
    python benchmarks/report.py --check    # exit 1 and print what differs or is unmarked
    python benchmarks/report.py --charts   # also write PNG charts into benchmarks/results/

Needs numpy (the complexity table's fits, through benchmarks/complexity.py),
and matplotlib for --charts; no Keras or TensorFlow.
"""

import argparse
import difflib
import re
import statistics
import sys
import textwrap
from collections import Counter, OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks import _records  # noqa: E402

DOCUMENTS = (ROOT / "benchmarks" / "README.md", ROOT / "README.md")
RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"(?P<open><!-- table:(?P<name>[\w-]+)(?P<options>[^>]*?)-->\n)(?P<body>.*?)(?P<close><!-- /table -->)",
                    re.S)
CELL = re.compile(r"(?P<open><!-- cell:(?P<name>[\w-]+)(?P<options>[^>]*?)-->)(?P<body>[^<\n]*)(?P<close><!-- /cell -->)")
# The options that pin a marker's records (one of them is required).
PINS = ("commit", "time", "run")
# Options of a cell marker that address the cell, not the records.
CELL_OPTIONS = ("row", "column", "number", "table")
# A benchmark figure in prose: a ratio ("1.4x", "0.97-1.01x"), a rate, a BLEU or chrF score.
FIGURE = re.compile(r"\b\d[\d,]*(?:\.\d+)?(?:-\d+(?:\.\d+)?)?x\b"
                    r"|\b\d[\d,]*(?:\.\d+)? (?:target |source )?(?:tokens|sentences|sent)/s\b"
                    r"|\b(?:BLEU|chrF) \d+\.\d\b")
SERVE_REFERENCES = ("ours in process, XLA", "CTranslate2 float32")


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


def load(name, results=RESULTS):
    path = Path(results) / f"{name}.jsonl"
    if not path.is_file():
        raise ValueError(f"no records: {path} does not exist")
    return _records.read(path)


def median_ratio(values, references):
    """Median over rounds of values[i] / references[i] (same-round ratios)."""
    return statistics.median(v / r for v, r in zip(values, references))


def machine_text(record):
    machine = record.get("machine", {})
    cpu = machine.get("cpu") or machine.get("processor")
    gpus = machine.get("gpus") or []
    parts = [f"{machine.get('cpus')} CPUs" + (f" ({cpu})" if cpu else "")]
    if gpus:
        parts.append(", ".join(gpus))
    return ", ".join(parts)


def load_text(record):
    load = record.get("load_average") or {}
    before, after = load.get("before"), load.get("after")
    if not before or not after:
        return "load average not recorded"
    return f"load average {before[0]:.1f} before and {after[0]:.1f} after"


def caption(record, what):
    return (f"`{record['command']}`, commit {record.get('commit') or 'unknown'}, {record.get('time')}, "
            f"{machine_text(record)}, {load_text(record)} ({what}):")


def markdown_table(header, rows, align=None):
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- serve


def serve_rates(record):
    """{search: {contender: [sentences/s per round]}} of a serve.py record."""
    batch = record["workload"]["batch"]
    return {search: {name: [batch / s for s in seconds] for name, seconds in contenders.items()}
            for search, contenders in record["seconds"].items()}


def short_name(name):
    return name.replace(" (translate_ids)", "")


def serve_summary_statistics(record):
    """{search: {contender: (median, min, max, vs ours XLA, vs CTranslate2 float32)}}; ratios None without the reference."""
    summary = {}
    for search, rates in serve_rates(record).items():
        summary[search] = OrderedDict()
        for name, values in rates.items():
            ratios = tuple(median_ratio(values, rates[ref]) if ref in rates else None for ref in SERVE_REFERENCES)
            summary[search][name] = (statistics.median(values), min(values), max(values)) + ratios
    return summary


def search_title(search, record):
    return f"beam {record['workload']['beam_size']}" if search == "beam" else search


def ratio_text(value):
    return "-" if value is None else f"{value:.2f}x"


def serve_table(records, options):
    record = select(records, options, "table:serve")[-1]
    summary = serve_summary_statistics(record)
    searches = list(summary)
    rounds = len(next(iter(record["seconds"][searches[0]].values())))
    header = ["contender"]
    for search in searches:
        header += [search_title(search, record), "vs ours XLA", "vs CT2 float32"]
    names = list(OrderedDict.fromkeys(name for search in searches for name in summary[search]))
    rows = []
    for name in names:
        row = [short_name(name)]
        for search in searches:
            if name in summary[search]:
                median, _, _, vs_ours, vs_ct2 = summary[search][name]
                row += [f"{median:.1f}", ratio_text(vs_ours), ratio_text(vs_ct2)]
            else:
                row += ["-", "-", "-"]
        rows.append(row)
    return caption(record, f"sentences/s, medians of {rounds} rounds; ratios are medians of the same-round "
                           "ratios") + "\n\n" + markdown_table(header, rows)


def serve_summary(records, options):
    """The README's short form: each contender's median sentences/s and its same-round ratio to ours XLA."""
    record = select(records, options, "table:serve-summary")[-1]
    summary = serve_summary_statistics(record)
    searches = list(summary)
    names = list(OrderedDict.fromkeys(name for search in searches for name in summary[search]))
    header = ["contender"] + [f"{search_title(s, record)}: sent/s (vs ours XLA)" for s in searches]
    rows = []
    for name in names:
        row = [short_name(name)]
        for search in searches:
            if name in summary[search]:
                median, _, _, vs_ours, _ = summary[search][name]
                row.append(f"{median:.1f} ({ratio_text(vs_ours)})")
            else:
                row.append("-")
        rows.append(row)
    rounds = len(next(iter(record["seconds"][searches[0]].values())))
    text = (f"`benchmarks/serve.py`, commit {record.get('commit')}, {machine_text(record)}, medians of {rounds} "
            "rounds, ratios the medians of same-round ratios; record in `benchmarks/results/serve.jsonl`:")
    return text + "\n\n" + markdown_table(header, rows)


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


def variants_table(records, options):
    """train_variants.py: each candidate change against the shipped layers, paired in one process;
    medians and ratios computed here from every round's raw rates."""
    record = select(records, options, "table:train-variants")[-1]
    workload, rounds = record["workload"], record["rounds"]
    rows = []
    for result in record["results"]:
        name = result["name"]
        rates = [r[name]["tokens_per_s"] for r in rounds]
        ratios = [r[name]["tokens_per_s"] / r[record["reference"]]["tokens_per_s"] for r in rounds]
        rows.append([name, result["label"], f"{statistics.median(rates):.0f}", f"{min(rates):.0f}-{max(rates):.0f}",
                     f"{statistics.median(ratios):.3f}x", f"{min(ratios):.3f}-{max(ratios):.3f}x"])
    header = ["variant", "what", "tokens/s (median)", "range", f"vs {record['reference']}", "range"]
    what = (f"{workload['kind']} workload, non-pad target tokens/s, one process, {len(rounds)} rounds of "
            f"{workload['steps']} steps per variant taking turns; ratios are medians of same-round ratios")
    return caption(record, what) + "\n\n" + markdown_table(header, rows)


def is_product(op_type):
    """Matrix-product kernels: (batched) MatMul and Einsum, oneDNN's and Eigen's."""
    return "MatMul" in op_type or "Einsum" in op_type


def profile_table(records, options, others=10):
    """train_profile.py: kernel time per step by op type, each contender against the reference, per round
    from the raw sums; medians over rounds, ratios the medians of same-round ratios."""
    record = select(records, options, "table:train-profile")[-1]
    workload, rounds, reference = record["workload"], record["rounds"], record["reference"]
    names = [result["name"] for result in record["results"]]

    def per_step(name, pick):  # [ms per step of the kernels `pick` selects, one per round]
        return [1000 * sum(s for t, s in r[name]["op_seconds"].items() if pick(t)) / r[name]["steps"]
                for r in rounds]

    def everything(_):
        return True

    rows = []
    for result in record["results"]:
        name = result["name"]
        total, products = per_step(name, everything), per_step(name, is_product)
        ratios = [t / r for t, r in zip(total, per_step(reference, everything))]
        wall = [1000 * r[name]["wall_seconds"] / r[name]["steps"] for r in rounds]
        rows.append([name, result["label"], f"{statistics.median(total):.0f}",
                     f"{statistics.median(products):.0f} ({statistics.median(products) / statistics.median(total):.0%})",
                     f"{statistics.median(total) - statistics.median(products):.0f}",
                     f"{statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f}x)",
                     f"{statistics.median(wall):.0f}"])
    what = (f"{workload['kind']} workload, one process, {len(rounds)} rounds of one profiled pass over the "
            f"{workload['batches']} batches per contender taking turns; milliseconds per step, medians over rounds")
    text = caption(record, what) + "\n\n" + markdown_table(
        ["contender", "what", "kernel time", "of which matrix products", "other kernels",
         f"kernel time vs {reference}", "wall time (profiled)"], rows,
        ["---", "---", "---:", "---:", "---:", "---:", "---:"])
    sums = Counter()
    for r in rounds:
        for op_type, seconds in r[reference]["op_seconds"].items():
            if not is_product(op_type):
                sums[op_type] += seconds
    largest = [op_type for op_type, _ in sums.most_common(others)]
    text += (f"\n\nThe {len(largest)} largest other op types of {reference} (ms per step, medians over rounds):\n\n")
    text += markdown_table(["op type", *names], [
        [op_type, *(f"{statistics.median(per_step(name, lambda t, o=op_type: t == o)):.1f}" for name in names)]
        for op_type in largest], ["---"] + ["---:"] * len(names))
    return text


# --------------------------------------------------------------------------- time to quality


def quality_label(record):
    settings = record.get("settings", {})
    label = {"ours": "ours", "keras-hub": "KerasHub layers", "opennmt-tf": "OpenNMT-tf"}.get(
        record["contender"], record["contender"])
    if record["contender"] == "keras-hub" and settings.get("optimizer") == "stock":
        label += ", stock Adam"
    return label


def quality_precision(record):
    precision = record.get("settings", {}).get("mixed_precision", "none")
    return "float32" if precision in (None, "none") else precision


def quality_groups(records):
    """{(precision, label): [records]} in first-seen order."""
    groups = OrderedDict()
    for record in records:
        groups.setdefault((quality_precision(record), quality_label(record)), []).append(record)
    return groups


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
    groups = quality_groups(chosen)
    header = ["contender", "precision", "seeds", "steps (mean)", "minutes", "BLEU mean (range)", "chrF mean (range)"]
    main, extra = [], []
    for (precision, label), group in groups.items():
        row = [label, precision, " ".join(str(r.get("seed", 0)) for r in group),
               f"{statistics.mean(r['steps'] for r in group):.0f}",
               f"{statistics.mean(r['train_minutes'] for r in group):.1f}",
               mean_and_range([r["bleu"] for r in group]), mean_and_range([r["chrf"] for r in group])]
        (main if precision == "float32" else extra).append(row)
    invocations = OrderedDict((r.get("run"), r) for r in chosen).values()  # one line per invocation
    text = "; ".join(f"`{r['command']}`, commit {r.get('commit') or 'unknown'}, {r.get('date')}"
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
            figure = statistics.median(entry["seconds"])
            figures.setdefault(key, []).append((record["time"], figure, entry))
    return figures


def gpu_table(records, options):
    """One GPU model's runs (`gpu="H200"` picks the records whose GPU name contains it); rows per model,
    batch shape, contender and precision."""
    from benchmarks import gpu

    options = dict(options)
    wanted = options.pop("gpu", None)
    if wanted:
        records = [r for r in records if wanted in gpu_name(r)]
    records = select(records, options, "table:gpu")
    names = list(OrderedDict.fromkeys(gpu_name(r) for r in records))
    if len(names) > 1:
        raise ValueError(f"table:gpu: the records come from several GPUs ({', '.join(names)}); "
                         'pick one with gpu="..."')
    peak = records[-1].get("peak_tflops", gpu.DENSE_BF16_PEAK_TFLOPS)  # one GPU model, one peak
    figures = gpu_statistics(records)
    train_rows, decode_rows = [], []
    for (part, preset, batch, length, contender, precision), runs in figures.items():
        if part == "train":
            tokens = batch * length
            rates = [tokens / seconds for _, seconds, _ in runs]
            paper = gpu.PAPER_TARGET_TOKENS / gpu.PAPER_SECONDS_PER_STEP[preset]
            peers = {time: seconds
                     for time, seconds, _ in figures.get((part, preset, batch, length, "torch", precision), [])}
            versus = [peers[time] / seconds for time, seconds, _ in runs if time in peers]
            flops = gpu.training_matmul_flops(preset, batch, length)
            step = statistics.median(seconds for _, seconds, _ in runs)
            train_rows.append([
                preset, f"{batch} x {length}", contender, precision, f"{step * 1000:.1f}",
                f"{statistics.median(rates):,.0f}" + (f" ({min(rates):,.0f}-{max(rates):,.0f})" if min(rates) != max(rates) else ""),
                f"{statistics.median(rates) / paper:.2f}x",
                "-" if contender == "torch" or not versus else f"{statistics.median(versus):.2f}x",
                f"{flops / step / 1e12 / peak:.0%}", str(len(runs)),
            ])
        else:
            median = statistics.median(seconds for _, seconds, _ in runs)
            decode_rows.append([preset, contender, precision, f"{batch / median:,.0f}",
                                f"{median / runs[0][2]['steps'] * 1000:.2f}", str(len(runs))])
    first, last = records[0], records[-1]
    gpus = last["machine"].get("gpus") or [last["machine"].get("gpu", "unknown GPU")]
    text = (f"{len(records)} invocations of `benchmarks/gpu.py` ({first['time']} to {last['time']}; commits "
            f"{', '.join(OrderedDict.fromkeys(str(r.get('commit')) for r in records))}; {gpus[0]}; "
            "records in `benchmarks/results/gpu.jsonl`). Training: target tokens per second from each run's "
            "median step time, the median over runs (range); ratios to torch are medians of same-run ratios; "
            "the share is the step's matrix-product FLOPs against the GPU's dense bfloat16 peak.")
    text += "\n\n" + markdown_table(
        ["model", "batch (pairs x tokens)", "contender", "precision", "ms/step", "target tokens/s",
         "vs the paper's 8 P100s", "vs torch, same precision", "of bf16 peak", "runs"], train_rows)
    text += ("\n\nDecoding (ours, `jax.jit`; sentences of 32 tokens, exactly the fixed number of tokens each; "
             "each run's median over its rounds, the median over runs):\n\n")
    text += markdown_table(["model", "search", "precision", "sentences/s", "ms per step", "runs"], decode_rows)
    return text


# --------------------------------------------------------------------------- complexity


def milliseconds(seconds):
    value = seconds * 1000
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def complexity_table(records, options):
    """Table 1 measured: fitted exponents against the paper's, the self-attention / LSTM
    crossover per width, and times per sequence on the diagonal n = d, all recomputed
    from the record's raw per-round seconds."""
    from benchmarks import complexity

    record = select(records, options, "table:complexity")[-1]
    settings = record["settings"]
    tokens, lengths, widths = settings["tokens"], settings["lengths"], settings["widths"]
    seconds = {name: {tuple(int(part.split("=")[1]) for part in key.split(",")): values
                      for key, values in cells.items()}
               for name, cells in record["seconds_per_batch"].items()}
    times = complexity.per_sequence(seconds, tokens)
    upper_n, upper_d = complexity.middle(lengths), complexity.middle(widths)
    exponent_rows = []
    for name, cells in times.items():
        p, q, _ = complexity.fit_exponents(cells)
        p_upper, q_upper, _ = complexity.fit_exponents(cells, upper_n, upper_d)
        paper = complexity.PAPER_EXPONENTS.get(name)
        exponent_rows.append([name, f"({paper[0]}, {paper[1]})" if paper else "-", f"{p:.2f}", f"{q:.2f}",
                              f"{p_upper:.2f}", f"{q_upper:.2f}"])
    text = caption(record, f"forward + backward, {tokens} tokens per batch in every cell, the median of "
                           f"{settings['rounds']} rounds of the best of {settings['repeats']} calls") + "\n\n"
    text += markdown_table(
        ["layer", "paper (p, q)", "p (n), all cells", "q (d), all cells", f"p, n >= {upper_n}, d >= {upper_d}",
         f"q, n >= {upper_n}, d >= {upper_d}"], exponent_rows, ["---", "---", "---:", "---:", "---:", "---:"])
    diagonal = [n for n in lengths if n in widths]
    names = list(times)
    text += "\n\nMilliseconds per sequence where n = d:\n\n" + markdown_table(
        ["n = d", *names], [[str(n), *(milliseconds(times[name][n, n]) for name in names)] for n in diagonal],
        ["---:"] * (len(names) + 1))
    if "self-attention" in times and "LSTM" in times:
        rows = []
        for d in widths:
            where, n = complexity.crossover(times["self-attention"], times["LSTM"], lengths, d)
            rows.append([str(d), {"at": f"{n:.0f} (n/d {n / d:.1f})", "below": f"below {n}",
                                  "above": f"never up to n = {n} (n/d > {n // d})"}[where]])
        text += ("\n\nFrom which n self-attention (with its projections) is slower than the LSTM; "
                 "the paper's rule of thumb says n = d:\n\n") + markdown_table(
            ["d", "self-attention slower than LSTM from n"], rows, ["---:", "---"])
    return text


GENERATORS = {
    "serve": ("serve", serve_table),
    "serve-summary": ("serve", serve_summary),
    "train-throughput": ("train_throughput", throughput_table),
    "train-variants": ("train_variants", variants_table),
    "train-profile": ("train_profile", profile_table),
    "quality": ("quality", quality_table),
    "gpu": ("gpu", gpu_table),
    "complexity": ("complexity", complexity_table),
}


# --------------------------------------------------------------------------- documents


def pinned(options, what):
    """`options` unless they pin no record (see the module's docstring)."""
    if not any(key in options for key in PINS):
        raise ValueError(f"{what}: the marker pins no record (give one of {', '.join(f'{k}=' for k in PINS)})")
    return options


def table_cell(text, row, column, number=None, table=1, what="cell"):
    """The cell at `row` and `column` of the `table`-th Markdown table of a generator's `text`.

    `row` is the row's first cell, or its first cells joined by " / " where the first one repeats
    (gpu: "base / 784 x 32 / ours / float32"); `number=N` keeps the Nth number of the cell."""
    tables = [block for block in text.split("\n\n") if block.startswith("| ")]
    if not row or not column or len(tables) < int(table):
        raise ValueError(f"{what}: give row= and column= of one of its {len(tables)} table(s)")
    lines = tables[int(table) - 1].splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    if column not in header:
        raise ValueError(f"{what}: no column {column!r} (columns: {header})")
    wanted = [part.strip() for part in row.split(" / ")]
    found = [cells for cells in ([cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:])
             if cells[:len(wanted)] == wanted]
    if len(found) != 1:
        raise ValueError(f"{what}: {len(found)} rows start with {row!r}; name one")
    cell = found[0][header.index(column)]
    if number is None:
        return cell
    numbers = re.findall(r"\d[\d,]*(?:\.\d+)?x?", cell)
    if len(numbers) < int(number):
        raise ValueError(f"{what}: cell {cell!r} has no number {number}")
    return numbers[int(number) - 1]


def render(text, results=RESULTS, source="document"):
    """`text` with every marked table and cell regenerated from the records under `results`."""
    cache = {}

    def generate(match, kind):
        name = match.group("name")
        if name not in GENERATORS:
            raise ValueError(f"{source}: unknown table {name!r} (known: {', '.join(GENERATORS)})")
        records_name, generator = GENERATORS[name]
        if records_name not in cache:
            cache[records_name] = load(records_name, results)
        options = parse_options(match.group("options"))
        what = f"{source}: {kind}:{name}"
        try:
            pinned(options, what)
            record_options = {k: v for k, v in options.items() if k not in CELL_OPTIONS}
            body = generator(cache[records_name], record_options)
            if kind == "cell":
                body = table_cell(body, options.get("row"), options.get("column"), options.get("number"),
                                  options.get("table", 1), what)
        except ValueError as error:
            raise ValueError(f"{source}: {error}" if not str(error).startswith(source) else str(error)) from None
        return body

    def replace_table(match):
        return match.group("open") + generate(match, "table") + "\n" + match.group("close")

    def replace_cell(match):
        return match.group("open") + generate(match, "cell") + match.group("close")

    return CELL.sub(replace_cell, MARKER.sub(replace_table, text))


def unmarked_figures(text, source="document"):
    """Benchmark figures quoted outside every table and cell marker, as "SOURCE:LINE: figure" lines.
    HTML comments and code spans (commands, file names) are not prose."""
    blanked = CELL.sub(lambda m: " " * len(m.group(0)), MARKER.sub(lambda m: "\n" * m.group(0).count("\n"), text))
    blanked = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), blanked, flags=re.S)
    blanked = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), blanked, flags=re.S)
    blanked = re.sub(r"`[^`\n]*`", "", blanked)
    found = []
    for number, line in enumerate(blanked.splitlines(), 1):
        found += [f"{source}:{number}: {figure.group(0)!r}" for figure in FIGURE.finditer(line)]
    return found


def check(documents=DOCUMENTS, results=RESULTS):
    """Unified diffs between each document and its regenerated text, and a list of the figures it
    quotes outside markers; empty when they agree and none is unmarked."""
    diffs = []
    for path in documents:
        text = Path(path).read_text(encoding="utf-8")
        expected = render(text, results, str(path))
        if expected != text:
            diffs.append("".join(difflib.unified_diff(
                text.splitlines(True), expected.splitlines(True), f"{path} (committed)", f"{path} (from records)")))
        unmarked = unmarked_figures(text, str(path))
        if unmarked:
            diffs.append("figures quoted without a record (put each in a cell marker, or drop it):\n"
                         + "\n".join(unmarked) + "\n")
    return diffs


# --------------------------------------------------------------------------- charts


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_chart(path, panels, title, unit, over="rounds"):
    """Horizontal bars of medians with min-max whiskers: panels = [(panel title, [(label, median, min, max)])]."""
    plt = _pyplot()
    height = max(2.5, 0.45 * max(len(bars) for _, bars in panels) + 1.2)
    width = max(10.0, 6.5 * len(panels))
    figure, axes = plt.subplots(1, len(panels), figsize=(width, height), squeeze=False)
    for axis, (panel_title, bars) in zip(axes[0], panels):
        labels = [label for label, _, _, _ in bars]
        medians = [median for _, median, _, _ in bars]
        errors = [[median - low for _, median, low, _ in bars], [high - median for _, median, _, high in bars]]
        positions = list(range(len(bars)))[::-1]
        axis.barh(positions, medians, xerr=errors, color="#4c72b0", ecolor="black", capsize=3)
        axis.set_yticks(positions, labels)
        for position, median in zip(positions, medians):
            axis.text(median, position + 0.25, f" {median:.1f}" if median < 1000 else f" {median:.0f}",
                      va="center", fontsize=8)
        axis.set_title(panel_title)
        axis.set_xlabel(f"{unit} (bar: median; whiskers: min-max over {over})")
        axis.grid(axis="x", alpha=0.3)
    figure.suptitle(textwrap.fill(title, int(width * 11)), fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def serve_chart(record, path):
    panels = []
    for search, stats in serve_summary_statistics(record).items():
        panels.append((search_title(search, record),
                       [(short_name(name), median, low, high) for name, (median, low, high, _, _) in stats.items()]))
    rounds = len(next(iter(next(iter(record["seconds"].values())).values())))
    title = (f"Decoding, sentences/s ({record['workload']['batch']} sentences x {record['workload']['steps']} tokens; "
             f"{rounds} rounds; commit {record.get('commit')}, {machine_text(record)})")
    return bar_chart(path, panels, title, "sentences/s")


def is_bfloat16_run(record):
    """A mixed-bfloat16 throughput run: its contenders' names end in -bf16."""
    return any(result["name"].endswith("-bf16") for result in record["results"])


def throughput_chart_name(record):
    """train_throughput_<workload>[_bf16].png: a mixed-bfloat16 run gets a chart of its own."""
    return f"train_throughput_{record['workload']['kind']}{'_bf16' if is_bfloat16_run(record) else ''}.png"


def throughput_chart(record, path):
    bars = [(r["name"], r["tokens_per_s"], min(r["tokens_per_s_by_round"]), max(r["tokens_per_s_by_round"]))
            for r in record["results"]]
    title = (f"Training throughput{', mixed bfloat16' if is_bfloat16_run(record) else ''}, {record['workload']['kind']} workload "
             f"({record['workload']['rounds']} rounds; "
             f"commit {record.get('commit')}, {machine_text(record)})")
    return bar_chart(path, [("non-pad target tokens/s", bars)], title, "tokens/s")


def quality_chart(records, path):
    """BLEU and chrF against training minutes, one colour per contender, every seed a point, means joined."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for (precision, label), group in quality_groups(records).items():
        name = label if precision == "float32" else f"{label} ({precision}, extra)"
        by_budget = OrderedDict()
        for record in sorted(group, key=lambda r: r.get("budget_minutes", r["train_minutes"])):
            by_budget.setdefault(record.get("budget_minutes", record["train_minutes"]), []).append(record)
        for axis, metric in zip(axes, ("bleu", "chrf")):
            points = axis.scatter([r["train_minutes"] for r in group], [r[metric] for r in group], alpha=0.5)
            axis.plot([statistics.mean(r["train_minutes"] for r in rs) for rs in by_budget.values()],
                      [statistics.mean(r[metric] for r in rs) for rs in by_budget.values()],
                      marker="o", color=points.get_facecolor()[0][:3], label=name,
                      linestyle="--" if precision != "float32" else "-")
    longest = max(r["train_minutes"] for r in records)
    for axis, metric, key in zip(axes, ("BLEU", "chrF"), ("bleu", "chrf")):
        axis.set_xlim(0, longest * 1.1)  # from zero: one budget would otherwise span a few seconds
        axis.set_ylim(0, max(r[key] for r in records) * 1.15)
        axis.set_xlabel("training minutes")
        axis.set_ylabel(metric)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="upper left")
    figure.suptitle("Time to quality (points: seeds; lines: means per budget)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def gpu_chart_name(name):
    """gpu_<model>.png, e.g. gpu_nvidia_h200.png: one chart per GPU model."""
    return "gpu_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + ".png"


def gpu_chart(records, path):
    """Training rates of one GPU model's records: a panel per model and batch shape, the paper's 8 P100s a bar."""
    from benchmarks import gpu

    panels = OrderedDict()
    for (part, preset, batch, length, contender, precision), runs in gpu_statistics(records).items():
        if part != "train":
            continue
        rates = [batch * length / seconds for _, seconds, _ in runs]
        if (preset, batch, length) not in panels:
            paper = gpu.PAPER_TARGET_TOKENS / gpu.PAPER_SECONDS_PER_STEP[preset]
            panels[preset, batch, length] = [("paper: 8 P100s", paper, paper, paper)]
        panels[preset, batch, length].append(
            (f"{contender}, {precision}", statistics.median(rates), min(rates), max(rates)))
    commits = ", ".join(OrderedDict.fromkeys(str(r.get("commit")) for r in records))
    title = (f"Training on one {gpu_name(records[-1])}, target tokens/s ({len(records)} invocations of "
             f"benchmarks/gpu.py, {records[0]['time']} to {records[-1]['time']}; commits {commits})")
    return bar_chart(path, [(f"{preset}, {batch} x {length} tokens", bars)
                            for (preset, batch, length), bars in panels.items()],
                     title, "target tokens/s", over="runs")


def write_charts(results=RESULTS, out=RESULTS):
    """Every chart whose records exist; returns the paths written."""
    results, out = Path(results), Path(out)
    written = []
    if (results / "serve.jsonl").is_file():
        written.append(serve_chart(load("serve", results)[-1], out / "serve.png"))
    if (results / "train_throughput.jsonl").is_file():
        for record in load("train_throughput", results):
            written.append(throughput_chart(record, out / throughput_chart_name(record)))  # latest of each
        written = list(OrderedDict.fromkeys(written))
    if (results / "quality.jsonl").is_file():
        records = load("quality", results)
        written.append(quality_chart(records, out / "quality.png"))
    if (results / "gpu.jsonl").is_file():
        by_gpu = OrderedDict()
        for record in load("gpu", results):
            by_gpu.setdefault(gpu_name(record), []).append(record)
        for name, records in by_gpu.items():
            written.append(gpu_chart(records, out / gpu_chart_name(name)))
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 with a diff if a table differs")
    parser.add_argument("--charts", action="store_true", help="also write PNG charts into benchmarks/results/")
    args = parser.parse_args(argv)
    try:
        if args.check:
            diffs = check()
            for diff in diffs:
                print(diff)
            if diffs:
                print("tables or figures differ from the records, or quote none: run python "
                      "benchmarks/report.py, and mark every quoted figure", file=sys.stderr)
                return 1
            print("tables and quoted figures agree with the records")
            return 0
        for path in DOCUMENTS:
            text = path.read_text(encoding="utf-8")
            updated = render(text, RESULTS, str(path))
            if updated != text:
                path.write_text(updated, encoding="utf-8")
                print(f"rewrote {path.relative_to(ROOT)}")
        if args.charts:
            for path in write_charts():
                print(f"wrote {Path(path).relative_to(ROOT)}")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
