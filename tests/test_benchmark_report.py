"""benchmarks/report.py: the committed tables are what the committed records give, and its arithmetic is right.

Pure Python (no Keras, no TensorFlow): it reads JSON lines and Markdown only.
"""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import report  # noqa: E402


def test_committed_tables_equal_what_the_records_give():
    diffs = report.check()
    assert not diffs, "tables differ from benchmarks/results (run python benchmarks/report.py):\n" + "\n".join(diffs)


def fixture_record():
    """Two contenders, three rounds, batch 10: rates are 10 / seconds."""
    return {
        "benchmark": "serve", "time": "2026-01-01 00:00:00 UTC", "commit": "abc1234",
        "command": "python benchmarks/serve.py --rounds 3",
        "machine": {"cpu": "Test CPU", "cpus": 4, "gpus": []},
        "load_average": {"before": [1.0, 1.0, 1.0], "after": [2.0, 1.0, 1.0]},
        "workload": {"batch": 10, "beam_size": 4, "steps": 50},
        "seconds": {"beam": {
            # rates 10, 5, 20
            "ours in process, XLA": [1.0, 2.0, 0.5],
            # rates 5, 10, 5: same-round ratios to ours 0.5, 2.0, 0.25 -> median 0.5;
            # the ratio of the medians would be 5 / 10 = 0.5 too, so a third contender tells them apart
            "CTranslate2 float32": [2.0, 1.0, 2.0],
            # rates 20, 4, 5: ratios to ours 2.0, 0.8, 0.25 -> median 0.8 (medians 5 / 10 would say 0.5);
            # to CTranslate2 4.0, 0.4, 1.0 -> median 1.0 (medians 5 / 5 = 1.0)
            "SavedModel XLA variant (translate_ids)": [0.5, 2.5, 2.0],
        }},
    }


def test_serve_table_from_a_fixture_matches_hand_computed_medians():
    text = report.serve_table([fixture_record()], {})
    assert text.splitlines()[0] == (
        "`python benchmarks/serve.py --rounds 3`, commit abc1234, 2026-01-01 00:00:00 UTC, 4 CPUs (Test CPU), "
        "load average 1.0 before and 2.0 after (sentences/s, medians of 3 rounds; ratios are medians of the "
        "same-round ratios):")
    assert text.splitlines()[2:] == [
        "| contender | beam 4 | vs ours XLA | vs CT2 float32 |",
        "| --- | --- | --- | --- |",
        "| ours in process, XLA | 10.0 | 1.00x | 2.00x |",
        "| CTranslate2 float32 | 5.0 | 0.50x | 1.00x |",
        "| SavedModel XLA variant | 5.0 | 0.80x | 1.00x |",
    ]


def test_serve_table_gives_ratios_to_the_references_its_record_has():
    record = fixture_record()
    record["seconds"] = {"beam": {
        "CTranslate2 float32": [2.0, 1.0, 2.0],  # rates 5, 10, 5
        "CTranslate2 int8": [1.0, 1.0, 1.0],  # rates 10, 10, 10
        # rates 5, 5, 10: to float32 1.0, 0.5, 2.0 -> 1.0; to int8 0.5, 0.5, 1.0 -> 0.5
        "SavedModel plain variant, bfloat16 (translate_ids)": [2.0, 2.0, 1.0],
    }}
    assert report.serve_table([record], {}).splitlines()[2:] == [
        "| contender | beam 4 | vs CT2 float32 | vs CT2 int8 |",
        "| --- | --- | --- | --- |",
        "| CTranslate2 float32 | 5.0 | 1.00x | 0.50x |",
        "| CTranslate2 int8 | 10.0 | 2.00x | 1.00x |",
        "| SavedModel plain variant, bfloat16 | 5.0 | 1.00x | 0.50x |",
    ]


def test_serve_profile_table_splits_each_step_into_products_and_the_rest():
    record = {**fixture_record(), "benchmark": "serve_profile", "command": "python benchmarks/serve_profile.py",
              "workload": {"preset": "base", "vocabulary": 32000, "batch": 16, "beam_size": 4, "rows": 64,
                           "steps": 50},
              "ms_per_step": {"int8, XLA": {"step": 40.0, "products": 30.0},
                              "float32, plain": {"step": 80.0, "products": 20.0}}}
    assert report.GENERATORS["serve-profile"][1]([record], {}).splitlines()[2:] == [
        "| precision | variant | model step | products alone | rest |",
        "| --- | --- | ---: | ---: | ---: |",
        "| int8 | XLA | 40.0 | 30.0 (75%) | 10.0 |",
        "| float32 | plain | 80.0 | 20.0 (25%) | 60.0 |",
    ]



def test_serve_kernels_table_gives_each_kernel_against_float32_and_onednn_columns_when_recorded():
    record = {**fixture_record(), "benchmark": "serve_kernels", "command": "python benchmarks/serve_profile.py",
              "calls": 5, "products_per_call": 10,
              "us_per_product": {"[2,4]x[4,8]": {"float32": 2000.0, "oneDNN int8": 4000.0}},
              "onednn_exec_us_per_product": {"[2,4]x[4,8]": {"float32": 1000.0, "oneDNN int8": 500.0}},
              "onednn_reorders_per_product": {"[2,4]x[4,8]": {"float32": 0.0, "oneDNN int8": 1.0}}}
    assert report.GENERATORS["serve-kernels"][1]([record], {}).splitlines()[2:] == [
        "| kernel | [2,4]x[4,8] ms | [2,4]x[4,8] vs float32 | [2,4]x[4,8] oneDNN ms | [2,4]x[4,8] reorders |",
        "| --- | ---: | ---: | ---: | ---: |",
        "| float32 | 2.00 | 1.00x | 1.00 | 0 |",
        "| oneDNN int8 | 4.00 | 0.50x | 0.50 | 1 |",
    ]
    record["onednn_exec_us_per_product"] = {}  # a record without --onednn-verbose: no oneDNN columns
    assert report.GENERATORS["serve-kernels"][1]([record], {}).splitlines()[4] == "| float32 | 2.00 | 1.00x |"

def test_markers_select_records_and_check_reports_a_difference(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    older, newer = fixture_record(), fixture_record()
    newer["commit"] = "def5678"
    newer["seconds"]["beam"]["ours in process, XLA"] = [0.5, 0.5, 0.5]
    (results / "serve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (older, newer)))
    document = tmp_path / "README.md"
    document.write_text("before\n<!-- table:serve commit=abc1234 -->\nstale\n<!-- /table -->\nafter\n")
    rendered = report.render(document.read_text(), results)
    assert "| ours in process, XLA | 10.0 | 1.00x | 2.00x |" in rendered  # the pinned record, not the latest
    assert rendered.startswith("before\n<!-- table:serve commit=abc1234 -->\n`python")
    assert rendered.endswith("<!-- /table -->\nafter\n")
    diffs = report.check([document], results)
    assert len(diffs) == 1 and "-stale" in diffs[0]
    document.write_text(rendered)
    assert report.check([document], results) == []
    document.write_text("<!-- table:serve commit=nope -->\n<!-- /table -->\n")
    with pytest.raises(ValueError, match="no record matches"):
        report.check([document], results)


def test_quality_table_averages_seeds_and_keeps_other_precisions_apart():
    def record(contender, seed, bleu, chrf, precision="none", optimizer=None, architecture=None):
        settings = {"mixed_precision": precision}
        if optimizer:
            settings["optimizer"] = optimizer
        if architecture:
            settings["architecture"] = architecture
        return {"contender": contender, "seed": seed, "run": "r1", "command": "python benchmarks/quality.py",
                "commit": "abc1234", "date": "2026-01-01 00:00 UTC", "machine": {"cpus": 2},
                "settings": settings, "steps": 100 + seed, "train_minutes": 20.0, "bleu": bleu, "chrf": chrf}

    records = [record("ours", 0, 5.0, 19.0), record("keras-hub", 0, 2.0, 13.0, optimizer="densified"),
               record("ours", 1, 6.0, 20.0), record("keras-hub", 1, 3.0, 14.0, optimizer="densified"),
               record("keras-hub", 0, 1.0, 12.0, optimizer="stock"),
               record("ours", 0, 4.0, 18.0, precision="mixed_bfloat16"),
               record("keras-hub", 0, 4.5, 17.0, optimizer="densified", architecture="tied")]
    lines = report.quality_table(records, {}).splitlines()
    # The like-for-like model is its own row; records without an architecture are the keras-io one.
    assert "| KerasHub layers, like for like | float32 | 0 | 100 | 20.0 | 4.5 | 17.0 |" in lines
    assert "| ours | float32 | 0 1 | 100 | 20.0 | 5.5 (5.0-6.0) | 19.5 (19.0-20.0) |" in lines
    assert "| KerasHub layers | float32 | 0 1 | 100 | 20.0 | 2.5 (2.0-3.0) | 13.5 (13.0-14.0) |" in lines
    assert "| KerasHub layers, stock Adam | float32 | 0 | 100 | 20.0 | 1.0 | 12.0 |" in lines
    extra = lines.index("Extra rows, other precision (not part of the comparison):")
    assert lines.index("| ours | mixed_bfloat16 | 0 | 100 | 20.0 | 4.0 | 18.0 |") > extra

    # Seeds from two invocations (sessions) in one table: run="r1|r2"; without it, only the latest invocation.
    later = [dict(record("ours", 2, 8.0, 24.0), run="r2", command="python benchmarks/quality.py --seeds 2")]
    assert "| ours | float32 | 2 | 102 | 20.0 | 8.0 | 24.0 |" in report.quality_table(records + later, {}).splitlines()
    both = report.quality_table(records + later, {"run": "r1|r2"}).splitlines()
    assert "| ours | float32 | 0 1 2 | 101 | 20.0 | 6.3 (5.0-8.0) | 21.0 (19.0-24.0) |" in both
    assert both[0].startswith("`python benchmarks/quality.py`, commit abc1234, 2026-01-01 00:00 UTC; "
                              "`python benchmarks/quality.py --seeds 2`, commit abc1234")


def throughput_record(names_and_rates, kind="synthetic"):
    """A train_throughput record as the script writes it, from per-round rates; the first name is the reference."""
    reference = names_and_rates[0][0]
    base = dict(names_and_rates)[reference]
    results = []
    for name, rates in names_and_rates:
        ratios = [rate / ref for rate, ref in zip(rates, base)]
        results.append({"name": name, "label": f"{name} label", "tokens_per_s": sorted(rates)[1],
                        "vs_reference": sorted(ratios)[1], "vs_reference_range": [min(ratios), max(ratios)],
                        "tokens_per_s_by_round": rates, "peak_mb": 1000})
    return {"benchmark": "train_throughput", "time": "2026-01-01 00:00:00 UTC", "commit": "abc1234",
            "command": "python benchmarks/train_throughput.py --rounds 3", "machine": {"cpus": 2},
            "workload": {"kind": kind, "rounds": 3}, "reference": reference,
            "matmul_floor_tokens_per_s": 2000.0, "floor_from_our_batches": ["opennmt-tf"], "results": results}


def test_throughput_table_rows_from_a_fixture():
    # ours 1000, 1200, 900; OpenNMT-tf 1100, 1000, 1000: same-round ratios 1.1, 0.833, 1.111 -> median 1.1;
    # bf16 1500, 1800, 1600: ratios 1.5, 1.5, 1.778 -> median 1.5 (the ratio of the medians would say 1.6)
    record = throughput_record([("ours-tf", [1000.0, 1200.0, 900.0]), ("opennmt-tf", [1100.0, 1000.0, 1000.0]),
                                ("ours-tf-bf16", [1500.0, 1800.0, 1600.0])], kind="real")
    lines = report.throughput_table([record], {}).splitlines()
    assert lines[2:] == [
        "| contender | what | tokens/s (median) | range | vs ours-tf | range | % of matmul floor |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        "| ours-tf | ours-tf label | 1000 | 900-1200 | 1.00x | 1.00-1.00x | 50% |",
        "| opennmt-tf | opennmt-tf label | 1000 | 1000-1100 | 1.10x | 0.83-1.11x | 50% (our batches) |",
        "| ours-tf-bf16 | ours-tf-bf16 label | 1600 | 1500-1800 | 1.50x | 1.50-1.78x | - |",
    ]


def test_opennmt_rate_is_total_tokens_over_total_time():
    from benchmarks._contender_opennmt import opennmt_intervals, opennmt_rate

    log = "\n".join([
        "INFO:tensorflow:Step = 5 ; steps/s = 0.10, tokens/s = 150 (50 source, 100 target) ; Learning rate = 0.1 ; "
        "Loss = 9.0",
        "INFO:tensorflow:Saved checkpoint",
        "INFO:tensorflow:Step = 10 ; steps/s = 2.00, tokens/s = 600 (200 source, 400 target) ; Learning rate = 0.1 ; "
        "Loss = 8.0",
        "INFO:tensorflow:Step = 15 ; steps/s = 0.50, tokens/s = 3000 (1000 source, 2000 target) ; Learning rate = 0.1 "
        "; Loss = 7.0",
    ])
    intervals = opennmt_intervals(log)
    assert intervals == [(5, 50.0, 5000.0), (5, 2.5, 1000.0), (5, 10.0, 20000.0)]
    rate = opennmt_rate(intervals)  # the first (tracing) interval left out
    assert rate["target_tokens"] == 21000.0 and rate["seconds"] == 12.5 and rate["steps"] == 10
    assert rate["tokens_per_s"] == pytest.approx(1680.0)  # the mean of the two rates would say 1200


def gpu_record(time, ours_seconds, torch_seconds, decode_seconds, gpu="Test GPU", batch=10, ct2_seconds=None):
    train = dict(part="train", preset="base", precision="float32", batch=batch, length=10)
    peers = [] if ct2_seconds is None else [
        dict(part="decode", preset="base", contender="CTranslate2 greedy", precision="int8_float16", batch=8,
             steps=4, seconds=ct2_seconds, vocabulary=1)]
    return {
        "benchmark": "gpu", "time": time, "commit": "abc1234", "command": "python benchmarks/gpu.py",
        "machine": {"cpus": 16, "gpus": [gpu]},
        "results": [
            dict(train, contender="ours", seconds=ours_seconds, parameters=1),
            dict(train, contender="torch", seconds=torch_seconds, parameters=1),
            dict(part="decode", preset="base", contender="ours greedy", precision="float32", batch=8, steps=4,
                 seconds=decode_seconds, parameters=1),
            dict(train, contender="ours", precision="mixed_bfloat16", error="out of memory"),
            *peers,
        ],
    }


def gpu_rows(table):
    """{(model, batch, contender, precision): row} of the training table."""
    return {tuple(cell.strip() for cell in line.strip("|").split("|")[:4]): line
            for line in table.splitlines() if line.startswith("| base |") and " x " in line}


def test_gpu_table_from_fixtures_matches_hand_computed_figures():
    records = [
        # ours: median step 0.1 s -> 100 tokens / 0.1 = 1,000 tokens/s; torch 0.2 s: ratio 2.0
        gpu_record("t1", [0.1, 0.3, 0.05], [0.2], [0.5, 0.25]),
        # ours: 0.125 s -> 800 tokens/s; torch 0.2 s: ratio 1.6 (median of 2.0 and 1.6: 1.8)
        gpu_record("t2", [0.125], [0.2], [1.0], ct2_seconds=[0.5, 0.6, 0.7]),
    ]
    table = report.gpu_table(records, {})
    rows = gpu_rows(table)
    ours = rows[("base", "10 x 10", "ours", "float32")]
    # Median step over runs: (0.1 + 0.125) / 2 = 112.5 ms; rates 1,000 and 800 -> median 900;
    # the paper's base rate is 25,000 / 0.4 = 62,500 tokens/s -> 0.01x.
    assert "| 112.5 | 900 (800-1,000) | 0.01x | - | 1.80x |" in ours  # no torch.compile run here: "-"
    # torch: 0.2 s in both runs -> 500 tokens/s, no range; 500 / 62,500 = 0.008 -> 0.01x.
    assert "| 200.0 | 500 | 0.01x | - |" in rows[("base", "10 x 10", "torch", "float32")]
    # Decoding: each run's median over its rounds, not its best (0.375 s of 0.5 and 0.25; 1.0 s),
    # their median 0.6875 s: 8 / 0.6875 = 11.6 -> "12"; per step 0.6875 / 4 = 171.875 ms.
    # (The best of the rounds would give 0.625 s: "13" and 156.25 ms.)
    # CTranslate2 int8_float16 ran in t2 only: 0.6 s (median of its rounds) against ours' 1.0 s in that
    # run -> 0.60x (a ratio of medians over all runs would say 0.6 / 0.6875 = 0.87x); its own row: 8 / 0.6.
    assert "| base | ours greedy | float32 | 8 | 12 | 171.88 | 0.60x | 2 |" in table
    assert "| base | CTranslate2 greedy | int8_float16 | 8 | 13 | 150.00 | 1.00x | 1 |" in table
    # A failed contender is left out, not shown as a figure.
    assert "mixed_bfloat16" not in table


def test_gpu_table_keeps_gpus_and_batch_shapes_apart():
    records = [
        gpu_record("t1", [0.1], [0.2], [0.5], gpu="NVIDIA H100 80GB HBM3"),
        # The older record format: one "gpu" text with memory and driver.
        {**gpu_record("t2", [0.4], [0.4], [0.5]), "machine": {"cpus": 16, "gpu": "NVIDIA H200, 143771 MiB, 580"}},
        # Four times the batch on the same GPU: 400 tokens / 0.2 s = 2,000 tokens/s; torch 0.5 s -> 2.50x.
        gpu_record("t3", [0.2], [0.5], [0.5], gpu="NVIDIA H200", batch=40),
    ]
    with pytest.raises(ValueError, match="several GPUs"):
        report.gpu_table(records, {})
    h200 = report.gpu_table(records, {"gpu": "H200"})
    assert h200.startswith("2 invocations")
    rows = gpu_rows(h200)
    assert set(rows) == {("base", "10 x 10", "ours", "float32"), ("base", "10 x 10", "torch", "float32"),
                         ("base", "40 x 10", "ours", "float32"), ("base", "40 x 10", "torch", "float32")}
    # Each batch shape is its own row, its ratio to torch taken against torch at the same shape.
    assert "| 400.0 | 250 | 0.00x | - | 1.00x | " in rows[("base", "10 x 10", "ours", "float32")]
    assert "| 200.0 | 2,000 | 0.03x | - | 2.50x | " in rows[("base", "40 x 10", "ours", "float32")]
    assert "| 1 |" in rows[("base", "40 x 10", "ours", "float32")]  # one run, not pooled with t2's
    h100 = report.gpu_table(records, {"gpu": "H100"})
    assert h100.startswith("1 invocations") and "| 100.0 | 1,000 |" in h100


def write_serve_records(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "serve.jsonl").write_text(json.dumps(fixture_record()) + "\n")
    return results


def test_a_quoted_figure_is_a_cell_of_its_record(tmp_path):
    results = write_serve_records(tmp_path)
    # SavedModel XLA variant: same-round ratios to ours 2.0, 0.8, 0.25 -> median 0.8 (hand-computed above).
    text = ('The variant runs at <!-- cell:serve commit=abc1234 row="SavedModel XLA variant" '
            'column="vs ours XLA" -->9.99x<!-- /cell --> of ours.\n')
    assert report.render(text, results) == text.replace("9.99x", "0.80x")
    rate = '<!-- cell:serve commit=abc1234 row="ours in process, XLA" column="beam 4" -->0<!-- /cell -->'
    assert report.render(rate, results) == rate.replace(">0<", ">10.0<")


def test_check_fails_on_an_edited_figure_an_unmarked_one_and_an_unpinned_marker(tmp_path):
    results = write_serve_records(tmp_path)
    document = tmp_path / "README.md"
    good = ('Served: <!-- cell:serve commit=abc1234 row="SavedModel XLA variant" column="vs ours XLA" -->'
            '0.80x<!-- /cell --> of ours, `--beam 4` in code is no figure.\n')
    document.write_text(good)
    assert report.check([document], results) == []
    document.write_text(good.replace("0.80x", "0.85x"))  # a figure edited by hand
    diffs = report.check([document], results)
    assert len(diffs) == 1 and "-Served: " in diffs[0] and "0.80x" in diffs[0]
    for unmarked in ("about 2.8x faster", "at 3,024 tokens/s", "BLEU 92.6 on the held-out split",
                     "0.97-1.01x the shipped layers"):
        document.write_text(good + unmarked + "\n")
        diffs = report.check([document], results)
        assert len(diffs) == 1 and "without a record" in diffs[0] and ":2: " in diffs[0], unmarked
    for marker in ('<!-- table:serve -->\n<!-- /table -->\n',
                   '<!-- cell:serve row="CTranslate2 float32" column="beam 4" -->5.0<!-- /cell -->\n'):
        document.write_text(marker)
        with pytest.raises(ValueError, match="pins no record"):
            report.check([document], results)


def test_report_check_exit_status(tmp_path, monkeypatch, capsys):
    """`report.py --check` exits 0 when the documents agree with the records and 1 when a figure was edited."""
    results = write_serve_records(tmp_path)
    document = tmp_path / "README.md"
    document.write_text('<!-- cell:serve commit=abc1234 row="CTranslate2 float32" column="beam 4" -->5.0<!-- /cell -->\n')
    monkeypatch.setattr(report, "DOCUMENTS", (document,))
    monkeypatch.setattr(report, "RESULTS", results)
    monkeypatch.setattr(report.check, "__defaults__", ((document,), results))
    assert report.main(["--check"]) == 0
    document.write_text(document.read_text().replace(">5.0<", ">5.5<"))
    assert report.main(["--check"]) == 1
    assert "+<!-- cell:serve" in capsys.readouterr().out


def test_committed_documents_quote_no_figure_without_a_record():
    # The documentation site's pages are checked too (docs/serving.md and docs/recipes.md quote figures).
    assert {ROOT / "docs" / "serving.md", ROOT / "docs" / "recipes.md"} <= set(report.DOCUMENTS)
    for path in report.DOCUMENTS:
        assert report.unmarked_figures(path.read_text(encoding="utf-8"), str(path)) == []


def benchmark_imports(directory):
    """{module: the benchmarks modules it imports, at any depth of the file (lazy imports count)}."""
    import ast

    graph = {}
    for path in sorted(Path(directory).glob("*.py")):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "benchmarks":
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks."):
                imported.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("benchmarks.")}
        graph[path.stem] = imported - {path.stem}
    return graph


def import_cycles(graph):
    cycles = []

    def visit(module, path):
        for other in sorted(graph.get(module, ())):
            if other in path:
                cycles.append(path[path.index(other):] + [other])
            elif other in graph:
                visit(other, path + [other])

    for module in graph:
        visit(module, [module])
    return cycles


def test_no_import_cycle_between_benchmark_modules(tmp_path):
    assert import_cycles(benchmark_imports(ROOT / "benchmarks")) == []
    # The check sees a lazy import inside a function, as the old _quality_keras_hub.py had of quality.py.
    (tmp_path / "quality.py").write_text("from benchmarks import _quality_keras_hub\n")
    (tmp_path / "_quality_keras_hub.py").write_text("def f():\n    from benchmarks.quality import versions\n")
    assert import_cycles(benchmark_imports(tmp_path))


def test_data_scale_table_from_a_fixture():
    from benchmarks._report_tables import data_scale_table

    def size(pairs, rss, stream, in_memory=None):
        rates = {"prepared stream": stream}
        if in_memory:
            rates["in-memory pipeline"] = in_memory
        return {"pairs": pairs, "prepare": {"seconds": 600.0, "peak_rss_mb": 2000.0},
                "train": {"seconds_to_first_step": 30.4, "peak_rss_mb": rss, "steps": 20},
                "resume": {"killed_after_step": 7, "first_step_after_resume": 6, "seconds_to_first_step": 20.6},
                "input_batches_per_second": rates}

    small = {"command": "python benchmarks/data_scale.py", "commit": "abc", "time": "t1", "machine": {"cpus": 2},
             "results": [size(100_000, 2000.0, [300, 500, 400], [100, 100, 200])]}
    large = dict(small, time="t2", results=[size(4_500_000, 2100.0, [350])])
    large["results"][0]["prepare"]["seconds"] = 1480.0
    text = data_scale_table([small, large, dict(small, time="t3")], {"time": "t1|t2"})
    rows = [line for line in text.splitlines() if line.startswith("| 100,000") or line.startswith("| 4,500,000")]
    # Same-round ratios 3.0, 5.0 and 2.0: their median is 3.0 (the ratio of the medians would be 4.0).
    assert rows[0].split(" | ")[-1] == "3.0x |" and "| 400 | 100 |" in rows[0]
    assert "| 2,100 MB | 1.05x |" in rows[1] and "| 21 s (step 6) |" in rows[1] and rows[1].endswith("| - | - |")
    # 600 s at 100,000 pairs, 1,480 s at 4,500,000: 0.2 ms a pair, 1,480 + 31.5M x 0.2 ms = 7,780 s at 36M.
    assert "36 million pairs (WMT14 English-French): 2.2 hours" in text
    assert text.count("`python benchmarks/data_scale.py`") == 2  # the two invocations, not the third


def test_serve_mix_table_from_a_fixture_record():
    run = dict(load_s=1.0, latencies_s=[1.0, 2.0, 9.0], rows=[1, 2, 3], sentences=6, stream_s=12.0,
               p50_s=2.0, p99_s=8.86, max_s=9.0, sentences_per_s=0.5)
    record = {"benchmark": "serve_mix", "time": "t", "commit": "abc1234", "command": "python benchmarks/serve_mix.py",
              "machine": {"cpus": 2}, "workload": dict(preset="tiny", beam_size=4, requests=3, max_input_length=64,
                                                       seed=0),
              "runs": {"xla/warm": dict(run, warmup_records=16, warmup_s=120.4),
                       "xla/cold": dict(run, warmup_records=0, warmup_s=0)}}
    table = report.GENERATORS["serve-mix"][1]([record], {})
    # p99 / p50 = 8.86 / 2.0 = 4.43 -> "4.4x"; a cold start has no warm-up records.
    assert "| xla | warm | 16 records, 120 s | 2.00 | 8.86 | 4.4x | 9.00 | 0.5 |" in table
    assert "| xla | cold | none | 2.00 | 8.86 | 4.4x | 9.00 | 0.5 |" in table
    assert "3 requests of 1 to 64 sentences, input limit 64 tokens" in table


def test_recipe_table_gives_the_pinned_runs_scores_and_refuses_a_run_without_one():
    run = {"benchmark": "parallel_text recipe", "time": "t1", "commit": "abc", "command": "python recipes/x.py",
           "machine": {"cpus": 2}, "steps": 4674, "test": {"sentences": 1000, "bleu": 7.2467, "chrf": 20.7184}}
    other = dict(run, benchmark="back_translation recipe", time="t2", test={"sentences": 10, "baseline": {}})
    table = report.GENERATORS["recipe"][1]
    assert "| parallel_text recipe | 4,674 | 1000 | 7.2 | 20.7 |" in table([run, other], {"time": "t1"})
    with pytest.raises(ValueError, match="scores no single model"):
        table([run, other], {"time": "t2"})


def test_pretrained_table_gives_the_import_and_each_contender_against_its_peer():
    record = {"benchmark": "pretrained", "time": "t", "commit": "abc1234", "command": "python benchmarks/pretrained.py",
              "machine": {"cpus": 2}, "workload": dict(vocabulary=58101, batch=8, source_tokens=16, steps=20,
                                                       beam_size=4, threads=2),
              "imports": [dict(seconds=21.04, cpu_seconds=10.26, peak_rss_mb=1870.4)],
              "seconds": {"imported, in process, plain graph": [2.0, 4.0, 4.0],  # rates 4, 2, 2
                          "native base, in process, plain graph": [2.0, 2.0, 4.0],  # rates 4, 4, 2
                          "imported SavedModel plain, int8": [1.0, 1.0, 1.0],  # rates 8
                          "CTranslate2 converter, int8": [0.5, 0.5, 0.25]},  # rates 16, 16, 32
              "cpu_seconds": {"imported, in process, plain graph": [3.0, 3.0, 3.0],
                              "native base, in process, plain graph": [3.0, 1.5, 3.0]}}
    tables = report.GENERATORS["pretrained"][1]([record], {}).split("\n\n")
    assert tables[1].splitlines()[2] == "| 1 | 21.0 | 10.3 | 1,870 |"
    rows = tables[3].splitlines()[2:]
    # Same-round ratios 1, 0.5, 1 -> 1.00x; ms per step = median seconds / 20 steps.
    # CPU: the peer's seconds over this one's, 1, 0.5, 1 -> 1.00x.
    assert rows[0] == ("| imported, in process, plain graph | 2.00 | 200 | 1.00x | 1.00x | "
                       "native base, in process, plain graph |")
    assert rows[1] == "| native base, in process, plain graph | 4.00 | 100 | - | - | - |"
    # 8 / 16, 8 / 16, 8 / 32 -> 0.50x; no CPU seconds recorded for these two
    assert rows[2] == "| imported SavedModel plain, int8 | 8.00 | 50 | 0.50x | - | CTranslate2 converter, int8 |"


def test_trip_table_gives_both_paths_before_and_after_and_refuses_another_record():
    def scores(before, after):
        return {"new_before": {"bleu": before, "chrf": 30.0}, "new_after": {"bleu": after, "chrf": 80.04}}

    trip = {"benchmark": "opus_mt trip", "time": "t1", "commit": "abc", "command": "python recipes/opus_mt/trip.py",
            "machine": {"cpus": 2}, "native": {"scores": scores(18.94, 82.46)}, "trip": {"scores": scores(18.94, 87.26)}}
    other = {"benchmark": "parallel_text recipe", "time": "t2", "commit": "abc", "command": "python recipes/x.py",
             "machine": {"cpus": 2}, "steps": 1, "test": {"sentences": 1, "bleu": 1.0, "chrf": 1.0}}
    table = report.GENERATORS["recipe-trip"][1]
    text = table([trip, other], {"time": "t1"})
    assert "| native (recipes/fine_tuning) | 18.9 | 82.5 | +63.5 | 30.0 | 80.0 |" in text
    assert "| exported, imported (recipes/opus_mt) | 18.9 | 87.3 | +68.3 | 30.0 | 80.0 |" in text
    with pytest.raises(ValueError, match="not a recipes/opus_mt/trip.py record"):
        table([trip, other], {"time": "t2"})


def test_captions_name_a_cpu_without_avx512_and_the_onednn_switch_the_record_ran_with(monkeypatch):
    """Two CPUs named "AMD EPYC" rank the contenders differently (AVX-512 or not), and TF_ENABLE_ONEDNN_OPTS
    moves TensorFlow's plain-graph figures: a caption says both where the record does, and only there."""
    from benchmarks import _harness
    from benchmarks._report_tables import caption

    plain = fixture_record()
    assert caption(plain, "x").startswith("`python benchmarks/serve.py --rounds 3`, commit abc1234, ")
    assert "(Test CPU)" in caption(plain, "x")
    avx2 = {**plain, "libraries": {"cpu_flags": ["avx", "avx2", "fma"],
                                   "tensorflow_onednn": {"TF_ENABLE_ONEDNN_OPTS": "1", "is_mkl_enabled": True}}}
    text = caption(avx2, "x")
    assert text.startswith("`TF_ENABLE_ONEDNN_OPTS=1 python benchmarks/serve.py --rounds 3`, commit abc1234, ")
    assert "4 CPUs (Test CPU, no AVX-512)" in text
    avx512 = {**plain, "command": "TF_ENABLE_ONEDNN_OPTS=0 python x.py",
              "libraries": {"cpu_flags": ["avx2", "avx512f"], "tensorflow_onednn": {"TF_ENABLE_ONEDNN_OPTS": "0"}}}
    text = caption(avx512, "x")
    assert text.startswith("`TF_ENABLE_ONEDNN_OPTS=0 python x.py`") and "(Test CPU)" in text  # not doubled
    # New records carry the variable in their command themselves.
    for variables, expected in (({"KERAS_BACKEND": "jax"}, "KERAS_BACKEND=jax "),
                                ({"KERAS_BACKEND": "tensorflow", "TF_ENABLE_ONEDNN_OPTS": "1"},
                                 "KERAS_BACKEND=tensorflow TF_ENABLE_ONEDNN_OPTS=1 ")):
        for name in _harness.COMMAND_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        command = _harness.command_line(["--rounds", "3"], str(ROOT / "benchmarks" / "serve.py"))
        assert command.startswith(expected) and command.endswith("benchmarks/serve.py --rounds 3"), command
