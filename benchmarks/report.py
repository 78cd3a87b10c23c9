"""Regenerates the benchmark tables and the figures quoted in prose (and the charts) from the committed records.

Every generated table sits between two marker comments in README.md,
benchmarks/README.md or a page of docs/:

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
one of those documents quotes a benchmark figure (a ratio such as
"1.4x", a rate in tokens/s or sentences/s, a BLEU or chrF score) outside a
marker.

The name after "table:" or "cell:" picks the generator (_report_tables.GENERATORS: serve,
serve-shortlist, serve-profile, serve-mix, quantize-quality, train-throughput, quality, gpu,
complexity, data-scale, recipe, recipe-trip) and so the records
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

Needs numpy (the complexity table's fits),
and matplotlib for --charts; no Keras or TensorFlow.
"""

import argparse
import difflib
import re
import statistics
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks import _harness  # noqa: E402
from benchmarks._report_tables import (  # noqa: E402  (the generators, and what the tests and charts use)
    GENERATORS, complexity_table, gpu_name, gpu_statistics, gpu_table, machine_text, milliseconds,
    parse_options, quality_groups, quality_table, search_title, serve_summary_statistics,
    serve_table, short_name, throughput_table,
)

DOCUMENTS = (ROOT / "benchmarks" / "README.md", ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
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


# --------------------------------------------------------------------------- records


def load(name, results=RESULTS):
    path = Path(results) / f"{name}.jsonl"
    if not path.is_file():
        raise ValueError(f"no records: {path} does not exist")
    return _harness.read(path)


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
