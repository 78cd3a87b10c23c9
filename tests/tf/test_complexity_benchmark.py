"""benchmarks/complexity.py (the paper's Table 1, measured): the exponent fit and the
crossover against known power laws, and a run at tiny sizes that writes its table and record."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def complexity():
    spec = importlib.util.spec_from_file_location("benchmark_complexity", ROOT / "benchmarks" / "complexity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LENGTHS = [16, 32, 64, 128, 256, 512]
WIDTHS = [64, 128, 256]


def test_fit_recovers_the_exponents_of_known_power_laws(complexity):
    attention = {(n, d): 3e-9 * n**2 * d for n in LENGTHS for d in WIDTHS}
    recurrent = {(n, d): 5e-8 * n * d**2 for n in LENGTHS for d in WIDTHS}
    p, q, points = complexity.fit_exponents(attention)
    assert points == 18 and p == pytest.approx(2) and q == pytest.approx(1)
    p, q, points = complexity.fit_exponents(recurrent, min_n=64, min_d=128)
    assert points == 8 and p == pytest.approx(1) and q == pytest.approx(2)
    # One width only: no exponent in d, and the one in n still comes out.
    p, q, _ = complexity.fit_exponents({(n, 64): n**1.5 for n in LENGTHS})
    assert p == pytest.approx(1.5) and q is None


def test_crossover_is_at_n_equals_d_for_the_papers_operation_counts(complexity):
    """n^2 d against n d^2 (same constant): equal exactly where n = d. The widths are
    off the length grid, so every crossover is interpolated between two lengths."""
    widths = [48, 96, 192]
    attention = {(n, d): n**2 * d for n in LENGTHS for d in widths}
    recurrent = {(n, d): n * d**2 for n in LENGTHS for d in widths}
    for d in widths:  # 48 between 32 and 64, 96 between 64 and 128, 192 between 128 and 256
        assert complexity.crossover(attention, recurrent, LENGTHS, d) == ("at", pytest.approx(d))
    # Three times the constant on attention: it gets slower at n = d / 3 (85.3 at d = 256, 21.3 at d = 64).
    slower = {(n, d): 3 * n**2 * d for n in LENGTHS for d in WIDTHS}
    recurrent = {(n, d): n * d**2 for n in LENGTHS for d in WIDTHS}
    assert complexity.crossover(slower, recurrent, LENGTHS, 256) == ("at", pytest.approx(256 / 3))
    assert complexity.crossover(slower, recurrent, LENGTHS, 64) == ("at", pytest.approx(64 / 3))
    assert complexity.crossover(slower, recurrent, LENGTHS, 128) == ("at", pytest.approx(128 / 3))
    # Not a power law, so the ratio is not linear in log n: attention n^2 + 24 n against
    # recurrent 50 n (d = 1) cross at n = 26; interpolating the log ratio on log n between
    # n = 16 (ratio 40/50) and n = 32 (ratio 56/50) puts it at 16 * 2^f, f = -r16 / (r32 - r16).
    attention = {(n, 1): n**2 + 24 * n for n in LENGTHS}
    recurrent = {(n, 1): 50 * n for n in LENGTHS}
    r16, r32 = math.log(40 / 50), math.log(56 / 50)
    expected = 16 * 2 ** (-r16 / (r32 - r16))  # 25.3, not the true 26: interpolated, not solved
    kind, n = complexity.crossover(attention, recurrent, LENGTHS, 1)
    assert kind == "at" and n == pytest.approx(expected) and 25 < n < 25.5
    faster = {(n, d): n**2 * d / 100 for n in LENGTHS for d in WIDTHS}
    assert complexity.crossover(faster, recurrent_of(WIDTHS), LENGTHS, 64) == ("above", 512)
    # Already slower at the shortest length: three times the constant at n = 16, d = 48.
    slower = {(n, 48): 3 * n**2 * 48 for n in LENGTHS}
    assert complexity.crossover(slower, recurrent_of([48]), LENGTHS, 48) == ("below", 16)


def recurrent_of(widths):
    return {(n, d): n * d**2 for n in LENGTHS for d in widths}


def test_quick_run_writes_the_table_and_the_record(complexity, tmp_path, capsys):
    layers = "self-attention,LSTM,Conv1D k=3"
    assert complexity.main(["--quick", "--lengths", "8,16", "--widths", "8,16", "--tokens", "32",
                            "--layers", layers, "--out-dir", str(tmp_path)]) == 0
    (table,) = tmp_path.glob("complexity-*.md")
    text = table.read_text()
    # The table report.py renders from the record (benchmarks/README.md's "Table 1, measured").
    assert "| layer | paper (p, q) |" in text and "| LSTM | (1, 2) |" in text and "load average" in text
    assert "is slower than the LSTM" in text and "GRU" not in text
    (line,) = (tmp_path / "complexity.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["settings"]["layers"] == layers.split(",") and record["command"].endswith(str(tmp_path))
    assert set(record["seconds_per_batch"]["LSTM"]) == {"n=8,d=8", "n=16,d=8", "n=8,d=16", "n=16,d=16"}
    assert all(len(v) == 2 and min(v) > 0 for v in record["seconds_per_batch"]["LSTM"].values())  # 2 rounds
    assert set(record["load_average"]) == {"before", "after"} and record["machine"]["cpus"] >= 1


def test_bad_settings_are_refused_with_the_flag(complexity, tmp_path):
    with pytest.raises(SystemExit):
        complexity.main(["--quick", "--layers", "Transformer-XL", "--out-dir", str(tmp_path)])
    with pytest.raises(SystemExit):
        complexity.main(["--quick", "--tokens", "8", "--out-dir", str(tmp_path)])
    assert not list(tmp_path.iterdir())
