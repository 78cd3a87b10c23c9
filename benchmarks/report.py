"""Regenerates the benchmark tables and the figures quoted in prose from the committed records, between the
marker comments of README.md, benchmarks/README.md and docs/ (the markers' syntax: benchmarks/README.md).
A ratio is the median of the ratios taken within each round (contenders take turns), not the ratio of the
medians. `--check` also fails on a benchmark figure quoted outside a marker. Standard library only.

    python benchmarks/report.py            # rewrite the tables and cells in place
    python benchmarks/report.py --check    # exit 1 and print what differs or is unmarked
"""

import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks import _harness  # noqa: E402
from benchmarks._report_serve import (  # noqa: E402
    serve_kernels_table, serve_mix_table, serve_profile_table, serve_real_gate_table, serve_real_table, serve_table,
)
from benchmarks._report_tables import (  # noqa: E402, F401  (the generators, and what the tests use)
    data_scale_cluster_table, data_scale_table, gpu_table, parse_options, pretrained_table, quality_table,
    quantize_quality_table, recipe_table, throughput_table, trip_table,
)

# marker name -> (records name, generator)
GENERATORS = {
    "serve": ("serve", serve_table),
    "serve-shortlist": ("serve_shortlist", serve_table),
    "serve-real": ("serve_real", serve_real_table),
    "serve-real-gate": ("serve_real", serve_real_gate_table),
    "serve-profile": ("serve_profile", serve_profile_table),
    "serve-kernels": ("serve_kernels", serve_kernels_table),
    "serve-mix": ("serve_mix", serve_mix_table),
    "quantize-quality": ("quantize_quality", quantize_quality_table),
    "train-throughput": ("train_throughput", throughput_table),
    "quality": ("quality", quality_table),
    "gpu": ("gpu", gpu_table),
    "data-scale": ("data_scale", data_scale_table),
    "data-scale-cluster": ("data_scale", data_scale_cluster_table),
    "recipe": ("recipes", recipe_table),
    "pretrained": ("pretrained", pretrained_table),
    "recipe-trip": ("recipes", trip_table),
}
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
            path = Path(results) / f"{records_name}.jsonl"
            if not path.is_file():
                raise ValueError(f"no records: {path} does not exist")
            cache[records_name] = _harness.read(path)
        options = parse_options(match.group("options"))
        what = f"{source}: {kind}:{name}"
        try:
            if not any(key in options for key in PINS):
                pins = ", ".join(f"{key}=" for key in PINS)
                raise ValueError(f"{what}: the marker pins no record (give one of {pins})")
            record_options = {k: v for k, v in options.items() if k not in CELL_OPTIONS}
            body = generator(cache[records_name], record_options)
            if kind == "cell":
                body = table_cell(body, options.get("row"), options.get("column"), options.get("number"),
                                  options.get("table", 1), what)
        except ValueError as error:
            raise ValueError(f"{source}: {error}" if not str(error).startswith(source) else str(error)) from None
        return body

    text = MARKER.sub(lambda match: match["open"] + generate(match, "table") + "\n" + match["close"], text)
    return CELL.sub(lambda match: match["open"] + generate(match, "cell") + match["close"], text)


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 with a diff if a table differs")
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
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
