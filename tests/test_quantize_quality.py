"""benchmarks/quantize_quality.py: its BLEU comparison and its report table, on hand-worked examples.

Pure Python (sacreBLEU, no Keras model): the script's translations need trained runs, which no test may.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import quantize_quality  # noqa: E402


def test_compare_scores_bleu_its_difference_and_identical_outputs_by_hand():
    outputs = ["a b c d e", "p q r s", "u v w x"]
    float32_outputs = ["a b c d e", "p q r t", "u v w x"]
    references = ["a b c d f", "p q r s", "u v w x"]
    found = quantize_quality.compare(outputs, float32_outputs, references, reference_bleu=80.0)
    # Matches over the corpus: 1-grams 12/13, 2-grams 9/10, 3-grams 6/7, 4-grams 3/4; 13 words against 13
    # (no brevity penalty): BLEU = 100 x geometric mean.
    bleu = 100 * (12 / 13 * 9 / 10 * 6 / 7 * 3 / 4) ** 0.25
    assert found["bleu"] == pytest.approx(bleu, abs=1e-3)
    assert found["bleu_vs_float32"] == pytest.approx(bleu - 80.0, abs=2e-3)
    assert found["identical_to_float32"] == 0.6667  # the first and the third outputs
    assert "tok:13a" in found["bleu_signature"]
    assert quantize_quality.compare(outputs, outputs, references)["bleu_vs_float32"] is None
    with pytest.raises(ValueError, match="as many"):
        quantize_quality.compare(outputs, float32_outputs, references[:1])


def test_quantize_quality_table_from_a_fixture():
    from benchmarks._report_tables import quantize_quality_table

    def row(name, bleu, difference, identical, **extra):
        return {"name": name, "bleu": bleu, "bleu_vs_float32": difference, "identical_to_float32": identical,
                **extra}

    result = {"run": "/runs/quickstart/", "sentences": 500, "decoding": {"beam_size": 4, "alpha": 0.6},
              "bleu_signature": "nrefs:1|tok:13a",
              "rows": [row("float32", 82.126, None, 1.0), row("int8", 81.9, -0.226, 0.964),
                       row("CTranslate2 int8", 81.5, -0.626, 0.9, vs_engine_float32={"bleu": 0.05, "identical": 0.97}),
                       row("CTranslate2 float32", 81.45, -0.676, 0.93)]}
    record = {"command": "python benchmarks/quantize_quality.py", "commit": "abc", "time": "t1",
              "machine": {"cpus": 2}, "results": [result]}
    text = quantize_quality_table([record, dict(record, commit="def", results=[])], {"commit": "abc"})
    lines = text.splitlines()
    assert lines[-3:] == [
        "| run | sentences | float32 | int8 | CTranslate2 int8 | CTranslate2 float32 |",
        "| --- | --- | --- | --- | --- | --- |",
        "| quickstart | 500 | 82.13 | 81.90 (-0.23; 96.4% same) "
        "| 81.50 (-0.63; 90.0% same; vs CT2 float32 +0.05, 97.0% same) | 81.45 (-0.68; 93.0% same) |"]
    assert "beam 4, alpha 0.6" in text and "sacreBLEU nrefs:1|tok:13a" in text
    assert "`python benchmarks/quantize_quality.py`, commit abc" in text
