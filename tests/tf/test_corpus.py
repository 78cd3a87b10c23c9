import gzip
import json
import logging

import pytest

from keras_transformer.data import corpus as corpus_lib
from keras_transformer.data.corpus import CorpusError
from keras_transformer.data.corpus import CorpusStats
from keras_transformer.data.corpus import load_corpus
from keras_transformer.data.corpus import open_corpus
from keras_transformer.data.corpus import read_jsonl
from keras_transformer.data.corpus import read_text_pair
from keras_transformer.data.corpus import read_tsv

PAIRS = [
    ("Hello world.", "Hallo Welt."),
    ("Grüße aus Köln — 東京 😀", "Greetings from Cologne"),
    ("A tab-free line", "Eine Zeile ohne Tabulator"),
]


def write_bytes(path, data):
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as stream:
            stream.write(data)
    else:
        path.write_bytes(data)
    return path


def write_lines(path, lines, newline="\n", bom=False):
    text = "".join(line + newline for line in lines)
    data = text.encode("utf-8")
    if bom:
        data = b"\xef\xbb\xbf" + data
    return write_bytes(path, data)


def write_jsonl(path, records):
    return write_lines(path, [json.dumps(r, ensure_ascii=False) for r in records])


# ---------------------------------------------------------------- formats


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_text_pair_reads_aligned_lines(tmp_path, suffix):
    source = write_lines(tmp_path / f"train.en{suffix}", [s for s, _ in PAIRS])
    target = write_lines(tmp_path / f"train.de{suffix}", [t for _, t in PAIRS])
    pairs, stats = load_corpus(source, target)
    assert pairs == PAIRS
    assert (stats.read, stats.kept, stats.skipped) == (3, 3, 0)


def test_text_pair_handles_crlf_and_bom(tmp_path):
    source = write_lines(
        tmp_path / "a.en", [s for s, _ in PAIRS], newline="\r\n", bom=True
    )
    target = write_lines(tmp_path / "a.de", [t for _, t in PAIRS], bom=True)
    pairs = list(read_text_pair(source, target))
    assert pairs == PAIRS


def test_lone_carriage_return_and_line_separator_do_not_split_lines(tmp_path):
    # Python's text mode and str.splitlines split on these, which would shift
    # one file against the other.
    source = write_lines(tmp_path / "a.en", ["one\rtwo", "three\u2028four"])
    target = write_lines(tmp_path / "a.de", ["eins", "drei"])
    pairs, stats = load_corpus(source, target)
    assert [t for _, t in pairs] == ["eins", "drei"]
    assert pairs[1][0] == "three\u2028four"
    assert stats.read == 2


@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_tsv(tmp_path, suffix):
    path = write_lines(tmp_path / f"c{suffix}", [f"{s}\t{t}" for s, t in PAIRS])
    pairs, stats = load_corpus(path)
    assert pairs == PAIRS
    assert stats.kept == 3


def test_tsv_other_columns(tmp_path):
    path = write_lines(
        tmp_path / "c.tsv", [f"id{i}\t{t}\t{s}" for i, (s, t) in enumerate(PAIRS)]
    )
    corpus = read_tsv(path, source_column=2, target_column=1, num_columns=3)
    assert list(corpus) == PAIRS


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_jsonl_default_keys(tmp_path, suffix):
    path = write_jsonl(
        tmp_path / f"c{suffix}", [{"en": s, "de": t, "file": "x"} for s, t in PAIRS]
    )
    pairs, _ = load_corpus(path)
    assert pairs == PAIRS


def test_jsonl_configurable_keys(tmp_path):
    path = write_jsonl(
        tmp_path / "bible.jsonl", [{"ref": "G 1:1", "en": s, "es": t} for s, t in PAIRS]
    )
    corpus = read_jsonl(path, source_key="es", target_key="en")
    assert list(corpus) == [(t, s) for s, t in PAIRS]


def test_open_corpus_format_override_and_unknown_suffix(tmp_path):
    path = write_jsonl(tmp_path / "data.txt", [{"en": "a", "de": "b"}])
    assert list(open_corpus(path, format="jsonl")) == [("a", "b")]
    with pytest.raises(ValueError, match="data.txt"):
        open_corpus(path)


def test_corpus_is_reiterable_and_streams(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"en": s, "de": t} for s, t in PAIRS])
    corpus = read_jsonl(path)
    iterator = iter(corpus)
    assert next(iterator) == PAIRS[0]
    assert list(corpus) == PAIRS
    assert list(corpus) == PAIRS
    assert corpus.stats.read == 3


# ---------------------------------------------------------------- errors


def test_line_count_mismatch_names_shorter_file_and_line(tmp_path):
    source = write_lines(tmp_path / "a.en", ["1", "2", "3"])
    target = write_lines(tmp_path / "a.de", ["1", "2"])
    with pytest.raises(CorpusError) as info:
        list(read_text_pair(source, target))
    assert info.value.path == str(target)
    assert info.value.line == 3
    assert str(target) in str(info.value) and ":3:" in str(info.value)
    with pytest.raises(CorpusError) as info:
        list(read_text_pair(target, source))
    assert info.value.path == str(target)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_invalid_utf8_names_file_and_line(tmp_path, suffix):
    path = write_bytes(tmp_path / f"a.en{suffix}", b"good\nstill good\nbad \xff byte\n")
    target = write_lines(tmp_path / "a.de", ["x", "y", "z"])
    with pytest.raises(CorpusError, match="invalid UTF-8") as info:
        list(read_text_pair(path, target))
    assert (info.value.path, info.value.line) == (str(path), 3)


def test_missing_file_is_named(tmp_path):
    missing = tmp_path / "nope.de"
    existing = write_lines(tmp_path / "a.en", ["x"])
    with pytest.raises(FileNotFoundError, match="nope.de"):
        read_text_pair(existing, missing)
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_jsonl(tmp_path / "nope.jsonl")


def test_malformed_json_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", ['{"en": "a", "de": "b"}', '{"en": "a", "de": '])
    with pytest.raises(CorpusError, match="malformed JSON") as info:
        list(read_jsonl(path))
    assert (info.value.path, info.value.line) == (str(path), 2)


def test_missing_json_key_names_file_line_and_key(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"en": "a", "de": "b"}] * 3 + [{"en": "a", "fr": "b"}])
    with pytest.raises(CorpusError, match="missing key 'de'") as info:
        list(read_jsonl(path))
    assert info.value.line == 4


@pytest.mark.parametrize("record", [[1, 2], {"en": 3, "de": "x"}])
def test_json_wrong_types(tmp_path, record):
    path = write_jsonl(tmp_path / "c.jsonl", [record])
    with pytest.raises(CorpusError) as info:
        list(read_jsonl(path))
    assert info.value.line == 1


def test_tsv_wrong_column_count_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "c.tsv", ["a\tb", "c\td\te"])
    with pytest.raises(CorpusError, match="expected 2 tab-separated columns, found 3") as info:
        list(read_tsv(path))
    assert (info.value.path, info.value.line) == (str(path), 2)
    path = write_lines(tmp_path / "d.tsv", ["a\tb", "no tab here"])
    with pytest.raises(CorpusError, match="found 1") as info:
        list(read_tsv(path))
    assert info.value.line == 2


def test_corrupt_gzip_names_file(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    data = gzip.compress(b'{"en": "a", "de": "b"}\n' * 100)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorpusError, match="cannot read") as info:
        list(read_jsonl(path))
    assert info.value.path == str(path)


def test_bad_options():
    with pytest.raises(ValueError, match="on_long"):
        corpus_lib.PairFilter(on_long="cut")
    with pytest.raises(ValueError, match="max_chars"):
        corpus_lib.PairFilter(max_chars=0)


# ---------------------------------------------------------------- filtering


def test_skip_empty_and_long_are_counted_and_logged(tmp_path, caplog):
    records = [
        {"en": "short", "de": "kurz"},
        {"en": "", "de": "leer"},
        {"en": "   ", "de": "nur Leerzeichen"},
        {"en": "x" * 30, "de": "zu lang"},
        {"en": "fine", "de": "y" * 30},
        {"en": "ok", "de": "gut"},
    ]
    path = write_jsonl(tmp_path / "c.jsonl", records)
    with caplog.at_level(logging.INFO, logger=corpus_lib.__name__):
        pairs, stats = load_corpus(path, max_chars=20)
    assert pairs == [("short", "kurz"), ("ok", "gut")]
    assert stats == CorpusStats(read=6, kept=2, skipped_empty=2, skipped_long=2, truncated=0)
    assert "skipped 2 empty and 2 over-long" in caplog.text
    assert str(path) in caplog.text


def test_truncate_long_and_keep_empty(tmp_path):
    source = write_lines(tmp_path / "a.en", ["abcdefghij", "", "ok"])
    target = write_lines(tmp_path / "a.de", ["short", "leer", "abc def ghi"])
    pairs, stats = load_corpus(source, target, max_chars=8, on_long="truncate", skip_empty=False)
    # "abc def " is cut to 8 characters and its trailing space stripped.
    assert pairs == [("abcdefgh", "short"), ("", "leer"), ("ok", "abc def")]
    assert stats == CorpusStats(read=3, kept=3, skipped_empty=0, skipped_long=0, truncated=2)
    assert all(len(s) <= 8 and len(t) <= 8 for s, t in pairs)


def test_tsv_blank_lines_count_as_empty(tmp_path):
    path = write_lines(tmp_path / "c.tsv", ["a\tb", "", "c\t"])
    pairs, stats = load_corpus(path)
    assert pairs == [("a", "b")]
    assert stats.skipped_empty == 2 and stats.read == 3


def test_write_jsonl_round_trips_tuples_and_dicts_and_leaves_no_partial_file(tmp_path):
    from keras_transformer.data.corpus import is_jsonl, write_jsonl

    path = tmp_path / "sub" / "pairs.jsonl.gz"
    assert write_jsonl(path, [("a cat", "eine Katze"), {"en": "a dog", "de": "ein Hund", "ref": "x 1:1"}]) == 2
    assert list(read_jsonl(path)) == [("a cat", "eine Katze"), ("a dog", "ein Hund")]
    assert is_jsonl(path) and is_jsonl("x.ndjson") and not is_jsonl("x.tsv.gz")

    def failing():
        yield ("one", "eins")
        raise RuntimeError("the generator broke")

    with pytest.raises(RuntimeError):
        write_jsonl(path, failing())
    # The earlier file is intact and no temporary file is left behind.
    assert len(list(read_jsonl(path))) == 2 and sorted(p.name for p in path.parent.iterdir()) == ["pairs.jsonl.gz"]


# ---------------------------------------------------------------- extra keys


def test_jsonl_extra_keys_yield_records_after_the_filter(tmp_path):
    rows = [
        {"ref": "Jude 1:1", "en": "  Hello.  ", "es": "Hola.", "n": 1},
        "",  # blank: an empty pair, dropped and counted
        {"ref": "Jude 1:2", "en": "", "es": "nada"},  # empty side: dropped
        {"ref": "  Jude 1:3 ", "en": "a" * 20, "es": "b", "id": "x"},  # truncated; the ref is kept as written
    ]
    path = write_lines(tmp_path / "c.jsonl", [json.dumps(r) if r else "" for r in rows])
    corpus = read_jsonl(path, source_key="en", target_key="es", max_chars=6, on_long="truncate",
                        extra_keys=("ref",))
    assert list(corpus) == [("Hello.", "Hola.", "Jude 1:1"), ("aaaaaa", "b", "  Jude 1:3 ")]
    assert (corpus.stats.read, corpus.stats.kept, corpus.stats.skipped_empty, corpus.stats.truncated) == (4, 2, 2, 1)
    # Two extra keys, in the order given; unfiltered, a blank line has None for each.
    raw = read_jsonl(path, source_key="en", target_key="es", skip_empty=False, extra_keys=("ref", "ref"))
    assert list(raw)[:2] == [("Hello.", "Hola.", "Jude 1:1", "Jude 1:1"), ("", "", None, None)]
    # Without extra keys: pairs, as before.
    assert list(read_jsonl(path, source_key="en", target_key="es"))[0] == ("Hello.", "Hola.")


@pytest.mark.parametrize(
    "row, words",
    [
        ({"en": "a", "de": "b"}, "missing key 'ref' (keys: ['de', 'en'])"),
        ({"en": "a", "de": "b", "ref": None}, "value of 'ref' is a NoneType, not a string"),
        ({"en": "a", "de": "b", "ref": 3}, "value of 'ref' is a int, not a string"),
        ({"en": "a", "de": "b", "ref": "\ud800"},
         "value of 'ref' is not valid Unicode: unpaired surrogate '\\ud800' at character 0"),
    ],
)
def test_jsonl_bad_extra_key_names_file_and_line(tmp_path, row, words):
    good = json.dumps({"en": "a", "de": "b", "ref": "r"})
    path = write_lines(tmp_path / "c.jsonl", [good, "", json.dumps(row)])
    with pytest.raises(CorpusError) as info:
        list(read_jsonl(path, extra_keys=("ref",)))
    assert (info.value.path, info.value.line) == (str(path), 3)
    assert str(info.value) == f"{path}:3: {words}"


@pytest.mark.parametrize("extra_keys", ["ref", ("ref", 1), [None]])
def test_jsonl_extra_keys_must_be_names(tmp_path, extra_keys):
    path = write_jsonl(tmp_path / "c.jsonl", [{"en": "a", "de": "b", "ref": "r"}])
    with pytest.raises(ValueError, match="extra_keys must be a tuple of key names"):
        read_jsonl(path, extra_keys=extra_keys)


def test_append_jsonl_appends_whole_lines(tmp_path):
    from keras_transformer.data.corpus import append_jsonl

    path = tmp_path / "log.jsonl"
    append_jsonl(path, {"step": 1, "text": "Grüße"})
    append_jsonl(path, {"step": 2})
    assert path.read_text(encoding="utf-8") == '{"step": 1, "text": "Grüße"}\n{"step": 2}\n'
