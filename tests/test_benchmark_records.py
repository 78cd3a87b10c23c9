"""benchmarks/_harness.py's `save`, the one way every benchmark script appends its record and says where.

Pure Python (standard library): no Keras.
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _harness  # noqa: E402


def test_save_appends_one_line_per_record_and_says_where(tmp_path, capsys):
    path = tmp_path / "results" / "bench.jsonl"  # the folder does not exist yet
    assert _harness.save(path, {"benchmark": "a", "text": "grüße"}) == path
    assert _harness.save(str(path), {"benchmark": "b"}) == path
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"benchmark": "a", "text": "grüße"}, {"benchmark": "b"}]
    assert capsys.readouterr().out == f"# record appended to {path}\n" * 2  # outside the repository: in full
    assert _harness.save("", {"benchmark": "c"}) is None and _harness.save(None, {}) is None  # --record ''
    assert capsys.readouterr().out == ""


def test_save_names_a_path_inside_the_repository_from_its_root(tmp_path, capsys, monkeypatch):
    # A stand-in repository root: the results folder of the real one must not change.
    monkeypatch.setattr(_harness, "ROOT", tmp_path)
    _harness.save(tmp_path / "benchmarks" / "results" / "x.jsonl", {})
    assert capsys.readouterr().out == "# record appended to benchmarks/results/x.jsonl\n"
