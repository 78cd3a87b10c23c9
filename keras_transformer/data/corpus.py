"""Readers for parallel corpora: two aligned text files, TSV and JSON lines.

Every reader streams `(source, target)` string pairs (`read_jsonl` with
`extra_keys` adds the values of those keys). Files ending in `.gz`
are read through gzip. Bad input raises `CorpusError` naming the file and the
1-based line; empty and over-long pairs are skipped or truncated as
configured and counted in a `CorpusStats` that is logged at the end of every
pass, so that nothing is dropped silently.

This module is pure Python (no TensorFlow), so corpora can be inspected and
cleaned without loading TensorFlow.
"""

import gzip
import json
import logging
import os
import zlib

from keras_transformer.data.pair_filter import CorpusStats, PairFilter

logger = logging.getLogger(__name__)

_BOM = "\ufeff"

# The shared corpora in this project are JSON lines like {"en": ..., "de": ...}.
DEFAULT_SOURCE_KEY = "en"
DEFAULT_TARGET_KEY = "de"


class CorpusError(ValueError):
    """Malformed corpus input; `path` and `line` (1-based) say where."""

    def __init__(self, path, line, message):
        self.path = os.fspath(path)
        self.line = line
        self.reason = message
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")


def unpaired_surrogate(text):
    """`"unpaired surrogate '\\ud800' at character N"` for the first lone
    surrogate in `text` (a str that no UTF-8 consumer, TensorFlow included,
    accepts), or None when `text` is valid Unicode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"unpaired surrogate {text[error.start]!r} at character {error.start}"
    return None


def _check_file(path):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"corpus file not found: {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"corpus path is a directory: {path}")
    return path


def _open_binary(path):
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def iter_lines(path):
    """Yields `(line_number, text)` for each line of a UTF-8 text file.

    `.gz` files are decompressed. A UTF-8 byte-order mark at the start and
    the line ending (LF or CRLF) are removed. Invalid UTF-8 or a corrupt gzip
    stream raises `CorpusError` with the line number.
    """
    path = _check_file(path)
    line_number = 0
    with _open_binary(path) as stream:
        try:
            for line_number, raw in enumerate(stream, start=1):
                # Split on "\n" only: a lone "\r" or U+2028 inside a sentence
                # must not break the line alignment of parallel files.
                if raw.endswith(b"\n"):
                    raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise CorpusError(
                        path,
                        line_number,
                        f"invalid UTF-8 at byte {error.start} of the line "
                        f"({raw[error.start:error.start + 4]!r})",
                    ) from None
                if line_number == 1 and text.startswith(_BOM):
                    text = text[1:]
                yield line_number, text
        except (OSError, EOFError, zlib.error) as error:
            if isinstance(error, FileNotFoundError):
                raise
            raise CorpusError(
                path, line_number + 1, f"cannot read file: {error}"
            ) from error


class ParallelCorpus:
    """A re-iterable stream of `(source, target)` pairs with counts.

    Iterating starts a fresh pass: `stats` is reset, updated as pairs are
    read, and logged when the pass ends. Build one with `read_text_pair`,
    `read_tsv`, `read_jsonl` or `open_corpus`.
    """

    def __init__(self, iter_raw_pairs, description, pair_filter):
        self._iter_raw_pairs = iter_raw_pairs
        self.description = description
        self.pair_filter = pair_filter
        self.stats = CorpusStats()

    def __iter__(self):
        stats = CorpusStats()
        self.stats = stats
        for source, target, *extra in self._iter_raw_pairs():
            pair = self.pair_filter.apply(source, target, stats)
            if pair is not None:
                yield (*pair, *extra) if extra else pair
        logger.info("corpus %s: %s", self.description, stats)

    def load(self):
        """Reads the whole corpus; returns `(pairs, stats)`."""
        pairs = list(self)
        return pairs, self.stats

    def __repr__(self):
        return f"ParallelCorpus({self.description})"


def _make_filter(max_chars, on_long, skip_empty, strip):
    return PairFilter(
        max_chars=max_chars, on_long=on_long, skip_empty=skip_empty, strip=strip
    )


def read_text_pair(
    source_path,
    target_path,
    *,
    max_chars=None,
    on_long="skip",
    skip_empty=True,
    strip=True,
):
    """Two aligned plain-text files, one sentence a line.

    Raises `CorpusError` if the files have different numbers of lines (naming
    the shorter file and the first line it lacks).
    """
    source_path = _check_file(source_path)
    target_path = _check_file(target_path)

    def iter_raw_pairs():
        source_lines = iter_lines(source_path)
        target_lines = iter_lines(target_path)
        line_number = 0
        while True:
            source = next(source_lines, None)
            target = next(target_lines, None)
            if source is None and target is None:
                return
            line_number += 1
            if source is None or target is None:
                shorter, longer = (
                    (source_path, target_path)
                    if source is None
                    else (target_path, source_path)
                )
                raise CorpusError(
                    shorter,
                    line_number,
                    f"line count differs: this file ends after "
                    f"{line_number - 1} lines but {longer} has more",
                )
            yield source[1], target[1]

    return ParallelCorpus(
        iter_raw_pairs,
        f"{source_path} | {target_path}",
        _make_filter(max_chars, on_long, skip_empty, strip),
    )


def read_tsv(
    path,
    *,
    source_column=0,
    target_column=1,
    num_columns=2,
    max_chars=None,
    on_long="skip",
    skip_empty=True,
    strip=True,
):
    """Tab-separated pairs.

    Every line must have exactly `num_columns` tab-separated fields (None: at
    least enough for both columns); a line that does not raises
    `CorpusError`. Blank lines count as empty pairs.
    """
    path = _check_file(path)
    for name, column in (
        ("source_column", source_column),
        ("target_column", target_column),
    ):
        if not isinstance(column, int) or column < 0:
            raise ValueError(f"{name} must be a non-negative int, got {column!r}")
        if num_columns is not None and column >= num_columns:
            raise ValueError(
                f"{name}={column} is out of range for num_columns={num_columns}"
            )
    needed = max(source_column, target_column) + 1

    def iter_raw_pairs():
        for line_number, line in iter_lines(path):
            if not line.strip():
                yield "", ""
                continue
            fields = line.split("\t")
            if num_columns is not None and len(fields) != num_columns:
                raise CorpusError(
                    path,
                    line_number,
                    f"expected {num_columns} tab-separated columns, "
                    f"found {len(fields)}",
                )
            if len(fields) < needed:
                raise CorpusError(
                    path,
                    line_number,
                    f"expected at least {needed} tab-separated columns, "
                    f"found {len(fields)}",
                )
            yield fields[source_column], fields[target_column]

    return ParallelCorpus(
        iter_raw_pairs, path, _make_filter(max_chars, on_long, skip_empty, strip)
    )


def read_jsonl(
    path,
    *,
    source_key=DEFAULT_SOURCE_KEY,
    target_key=DEFAULT_TARGET_KEY,
    max_chars=None,
    on_long="skip",
    skip_empty=True,
    strip=True,
    extra_keys=(),
):
    """JSON lines, one object a line, e.g. `{"en": "...", "de": "..."}`.

    With `extra_keys` (a tuple of key names, e.g. `("ref",)`) the corpus
    yields records `(source, target, *values of extra_keys)` instead of
    pairs; the extra values must be strings too, and are neither stripped
    nor truncated. Blank lines count as empty pairs (with None for each
    extra key). Malformed JSON, a line that is not an object, a missing key
    (extra keys included), a value that is not a string (None counts as ""
    for the source and target only) or one with an unpaired surrogate
    escape (`"\\ud800"`) raises `CorpusError` naming the file and line.
    """
    path = _check_file(path)
    if isinstance(extra_keys, str) or not all(isinstance(key, str) for key in extra_keys):
        raise ValueError(f"extra_keys must be a tuple of key names (strings), got {extra_keys!r}")
    extra_keys = tuple(extra_keys)

    def iter_raw_pairs():
        for line_number, line in iter_lines(path):
            if not line.strip():
                yield ("", "") + (None,) * len(extra_keys)
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise CorpusError(
                    path, line_number, f"malformed JSON: {error.msg} "
                    f"(column {error.colno})"
                ) from None
            except ValueError as error:
                # Python's own limit on integer literals (4300 digits).
                raise CorpusError(
                    path, line_number, f"malformed JSON: {error}"
                ) from None
            except RecursionError:
                raise CorpusError(
                    path, line_number, "malformed JSON: nested too deeply"
                ) from None
            if not isinstance(record, dict):
                raise CorpusError(
                    path,
                    line_number,
                    f"expected a JSON object, got {type(record).__name__}",
                )
            values = []
            for index, key in enumerate((source_key, target_key) + extra_keys):
                if key not in record:
                    raise CorpusError(
                        path,
                        line_number,
                        f"missing key {key!r} (keys: {sorted(record)})",
                    )
                value = record[key]
                if value is None and index < 2:
                    value = ""
                if not isinstance(value, str):
                    raise CorpusError(
                        path,
                        line_number,
                        f"value of {key!r} is a {type(value).__name__}, "
                        f"not a string",
                    )
                if "\\u" in line:
                    # A "\ud800" escape decodes to a lone surrogate.
                    problem = unpaired_surrogate(value)
                    if problem:
                        raise CorpusError(
                            path, line_number, f"value of {key!r} is not valid Unicode: {problem}"
                        )
                values.append(value)
            yield tuple(values)

    return ParallelCorpus(
        iter_raw_pairs,
        f"{path} [{source_key} -> {target_key}]",
        _make_filter(max_chars, on_long, skip_empty, strip),
    )


def _format_of(path):
    name = os.fspath(path).lower()
    if name.endswith(".gz"):
        name = name[: -len(".gz")]
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith(".tsv"):
        return "tsv"
    return None


def is_jsonl(path):
    """True for the JSON-lines suffixes `.jsonl`, `.json`, `.ndjson`, with or without `.gz`."""
    return _format_of(path) == "jsonl"


def write_jsonl(path, records, keys=(DEFAULT_SOURCE_KEY, DEFAULT_TARGET_KEY)):
    """Writes one JSON object per record; gzip if `path` ends in `.gz`.

    A record is a dict (written as it is) or a tuple whose items go under
    `keys` in order. The file appears whole or not at all (written beside
    it, then renamed), and the directory is created. Returns the count.
    """
    path = os.fspath(path)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    temporary = path + ".tmp"
    opener = gzip.open if path.endswith(".gz") else open
    count = 0
    try:
        with opener(temporary, "wt", encoding="utf-8") as stream:
            for record in records:
                if not isinstance(record, dict):
                    record = dict(zip(keys, record))
                stream.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    return count


def append_jsonl(path, record):
    """Appends `record` (a dict) to `path` as one JSON line, flushed to disk,
    so that a run killed right after still has the line (a kill during the
    write leaves at most a torn last line, which readers of logs skip)."""
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(record, ensure_ascii=False) + "\n")
        stream.flush()
        os.fsync(stream.fileno())


def open_corpus(path, target_path=None, *, format=None, **options):
    """Opens a corpus, choosing the reader from the arguments.

    `open_corpus(src, tgt)` reads two aligned text files; `open_corpus(path)`
    reads TSV (`.tsv`) or JSON lines (`.jsonl`, `.json`, `.ndjson`), with or
    without `.gz`. `format="tsv"|"jsonl"` overrides the suffix. Other keyword
    arguments go to the reader (`source_key`, `max_chars`, ...).
    """
    if target_path is not None:
        if format not in (None, "text"):
            raise ValueError(
                f"format={format!r} cannot take two paths; two paths mean "
                f"aligned plain-text files"
            )
        return read_text_pair(path, target_path, **options)
    format = format or _format_of(path)
    if format == "jsonl":
        return read_jsonl(path, **options)
    if format == "tsv":
        return read_tsv(path, **options)
    raise ValueError(
        f"cannot tell the corpus format of {os.fspath(path)!r}: name it "
        f"*.tsv or *.jsonl (optionally .gz), pass format='tsv'|'jsonl', or "
        f"pass a target_path for two aligned text files"
    )


def load_corpus(path, target_path=None, **options):
    """Reads a whole corpus into a list; returns `(pairs, stats)`."""
    return open_corpus(path, target_path, **options).load()
