"""Hostile input: random Unicode, control characters, CRLF, a BOM, invalid UTF-8, very long lines.

Property-based tests (hypothesis) of the corpus readers, the tokenizer,
`translate` and the exported text signature. The contract everywhere: either a
clear error (`CorpusError` naming the file and line, `TypeError`/`ValueError`
naming the argument) or a documented result (skipped pairs counted in the
stats, valid UTF-8 text) -- never another exception from deep inside
TensorFlow, never output that is not valid UTF-8.

Also: loading a `.keras` file stays in Keras safe mode, and none of our
formats needs pickle.
"""

import contextlib
import gzip
import json
import pickle
import re
import zipfile
from pathlib import Path

import _pickle
import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keras_transformer as kt
from keras_transformer import config as config_lib
from keras_transformer.data import SubwordTokenizer
from keras_transformer.data.corpus import CorpusError, read_jsonl, read_text_pair, read_tsv
from keras_transformer.decoding import Translator, translate
from keras_transformer.export import export_saved_model
from keras_transformer.run import data as run_data, trained as run_trained
from keras_transformer.training import StepCheckpoint

PACKAGE_DIR = Path(kt.__file__).resolve().parent

# Few examples and a fixed seed keep CI short and the runs reproducible; the
# TensorFlow calls (first traces) make timing deadlines meaningless.
# function_scoped_fixture: `tmp_path` is only a parent directory here, every
# example writes its own files.
settings.register_profile(
    "hostile_input",
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,  # nothing written into the working tree
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
HOSTILE = settings.get_profile("hostile_input")

# Characters that trip up naive text handling: NUL and other C0/C1 controls,
# DEL, tab, CR, BOM, line/paragraph separators, zero-width and direction
# marks, the replacement character, astral and last code points.
SPECIAL_CHARACTERS = (
    "\x00\x01\x07\x08\x0b\x0c\x1b\x1f\x7f\x80\x85\x9f\t\r\ufeff\u2028\u2029"
    "\u200b\u200e\u202e\ufffd\ufffe\uffff\U0001f600\U0001f1e9\U0010ffff"
)
# Byte sequences that are not UTF-8: stray continuation/lead bytes, a cut
# sequence, an encoded surrogate, an overlong slash, a code point past U+10FFFF.
INVALID_UTF8 = [b"\xff", b"\xfe", b"\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"]
BOM = b"\xef\xbb\xbf"

# Every code point that UTF-8 can encode (no surrogates), newline excluded.
any_character = st.characters(codec="utf-8", exclude_characters="\n")


@st.composite
def hostile_text(draw, long_size=(2_000, 20_000)):
    """A str without newline: random Unicode and special characters, sometimes very long."""
    parts = draw(
        st.lists(
            st.one_of(
                st.text(any_character, max_size=24),
                st.text(st.sampled_from(SPECIAL_CHARACTERS), max_size=6),
                st.sampled_from(["the cat", " ", "Katze", "\t", "\r"]),
            ),
            max_size=5,
        )
    )
    text = "".join(parts)
    if draw(st.integers(0, 7)) == 0:
        size = draw(st.integers(*long_size))
        text = ((text or "long ") * size)[:size]
    return text


@st.composite
def hostile_line_bytes(draw, invalid=True, long_size=(2_000, 20_000)):
    """The bytes of one line (no b"\\n"): UTF-8 text, maybe with invalid sequences inserted."""
    data = draw(hostile_text(long_size=long_size)).encode("utf-8")
    if invalid and draw(st.integers(0, 3)) == 0:
        junk = draw(st.one_of(st.sampled_from(INVALID_UTF8), st.binary(min_size=1, max_size=6)))
        junk = junk.replace(b"\n", b"")
        position = draw(st.integers(0, len(data)))
        data = data[:position] + junk + data[position:]
    return data


@st.composite
def file_layout(draw):
    """How lines are joined: LF or CRLF, a final newline or not, a BOM or not, gzip or not."""
    return {
        "newline": draw(st.sampled_from([b"\n", b"\r\n"])),
        "final_newline": draw(st.booleans()),
        "bom": draw(st.booleans()),
        "gzip": draw(st.booleans()),
    }


filter_options = st.fixed_dictionaries(
    {
        "max_chars": st.one_of(st.none(), st.integers(1, 40)),
        "on_long": st.sampled_from(["skip", "truncate"]),
    }
)


def effective_layout(layout, lines):
    """A last empty line exists only if a newline ends it (a file has no empty last line)."""
    return dict(layout, final_newline=layout["final_newline"] or lines[-1] == b"")


def write_lines(directory, stem, suffix, lines, layout):
    layout = effective_layout(layout, lines)
    data = layout["newline"].join(lines)
    if layout["final_newline"]:
        data += layout["newline"]
    if layout["bom"]:
        data = BOM + data
    path = Path(directory) / (stem + suffix + (".gz" if layout["gzip"] else ""))
    path.write_bytes(gzip.compress(data, mtime=0) if layout["gzip"] else data)
    return str(path)


def reference_lines(lines, layout):
    """What a line reader must see: per line the text, or None if it is not UTF-8.

    Independent of the reader: works on the list of line bytes we wrote.
    """
    layout = effective_layout(layout, lines)
    decoded = []
    for number, raw in enumerate(lines, start=1):
        if layout["bom"] and number == 1:
            raw = BOM + raw
        # The reader removes "\n", then one "\r": the CR of a CRLF ending, or
        # else a CR that ends the line's own bytes.
        ends_with_crlf = layout["newline"] == b"\r\n" and (number < len(lines) or layout["final_newline"])
        if not ends_with_crlf and raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            decoded.append(None)
            continue
        if number == 1 and text.startswith("\ufeff"):
            text = text[1:]
        decoded.append(text)
    return decoded


class Expected:
    """The reference outcome of a pass: pairs kept and counts, or the first bad line."""

    def __init__(self, options):
        self.max_chars = options["max_chars"]
        self.on_long = options["on_long"]
        self.pairs = []
        self.read = self.skipped_empty = self.skipped_long = self.truncated = 0
        self.error = None  # (path, line, reason pattern)

    def add(self, source, target):
        self.read += 1
        source, target = source.strip(), target.strip()
        if not source or not target:
            self.skipped_empty += 1
            return
        limit = self.max_chars
        if limit is not None and max(len(source), len(target)) > limit:
            if self.on_long == "skip":
                self.skipped_long += 1
                return
            source, target = source[:limit].rstrip(), target[:limit].rstrip()
            self.truncated += 1
        self.pairs.append((source, target))


def check_valid_text(value):
    assert isinstance(value, str)
    value.encode("utf-8")  # raises on a lone surrogate
    assert "\n" not in value


def check_pass(corpus, expected):
    """Iterates `corpus`: the pairs before the first bad line, then that line's CorpusError."""
    pairs = []
    error = None
    try:
        for pair in corpus:
            pairs.append(pair)
    except CorpusError as caught:
        error = caught
    # Anything but CorpusError propagates and fails the test.
    for source, target in pairs:
        check_valid_text(source)
        check_valid_text(target)
    assert pairs == expected.pairs[: len(pairs)]
    if expected.error is None:
        assert error is None, str(error)[:300]
        assert pairs == expected.pairs
        stats = corpus.stats
        assert (stats.read, stats.kept, stats.skipped_empty, stats.skipped_long, stats.truncated) == (
            expected.read, len(expected.pairs), expected.skipped_empty, expected.skipped_long,
            expected.truncated,
        )
        assert stats.read == stats.kept + stats.skipped
    else:
        path, line, reason = expected.error
        assert error is not None, f"expected a CorpusError at {path}:{line}"
        assert (error.path, error.line) == (path, line), str(error)[:300]
        assert str(error).startswith(f"{path}:{line}: ")
        assert re.search(reason, error.reason), error.reason[:300]
        assert pairs == expected.pairs


# ---------------------------------------------------------------------------
# Corpus readers


@HOSTILE
@given(
    line_pairs=st.lists(st.tuples(hostile_line_bytes(), hostile_line_bytes()), min_size=1, max_size=8),
    source_layout=file_layout(),
    target_layout=file_layout(),
    options=filter_options,
)
def test_text_pair_reader_on_hostile_bytes(tmp_path, line_pairs, source_layout, target_layout, options):
    source_lines = [source for source, _ in line_pairs]
    target_lines = [target for _, target in line_pairs]
    source_path = write_lines(tmp_path, "pair", ".src", source_lines, source_layout)
    target_path = write_lines(tmp_path, "pair", ".tgt", target_lines, target_layout)
    expected = Expected(options)
    sources = reference_lines(source_lines, source_layout)
    targets = reference_lines(target_lines, target_layout)
    for number, (source, target) in enumerate(zip(sources, targets), start=1):
        # The source line is read before the target line.
        if source is None or target is None:
            expected.error = (source_path if source is None else target_path, number, "invalid UTF-8")
            break
        expected.add(source, target)
    check_pass(read_text_pair(source_path, target_path, **options), expected)


@HOSTILE
@given(
    lines=st.lists(
        st.one_of(
            st.tuples(hostile_line_bytes(), hostile_line_bytes()).map(lambda pair: pair[0] + b"\t" + pair[1]),
            hostile_line_bytes(),  # often one column only
            st.sampled_from([b"", b"  ", b"\t", b"a\tb\tc"]),
        ),
        min_size=1,
        max_size=8,
    ),
    layout=file_layout(),
    options=filter_options,
)
def test_tsv_reader_on_hostile_bytes(tmp_path, lines, layout, options):
    path = write_lines(tmp_path, "corpus", ".tsv", lines, layout)
    expected = Expected(options)
    for number, text in enumerate(reference_lines(lines, layout), start=1):
        if text is None:
            expected.error = (path, number, "invalid UTF-8")
            break
        if not text.strip():
            expected.add("", "")
            continue
        fields = text.split("\t")
        if len(fields) != 2:
            expected.error = (path, number, f"expected 2 tab-separated columns, found {len(fields)}")
            break
        expected.add(*fields)
    check_pass(read_tsv(path, **options), expected)


# JSON lines that must be refused, with the reason the error must give.
BAD_JSON_LINES = [
    (b'{"en": "a\\udc80 b", "de": "x"}', "unpaired surrogate"),
    (b'{"en": "x", "de": "\\ud83d"}', "unpaired surrogate"),
    (b"[" * 100_000, "nested too deeply"),
    (b'{"en": ' + b"7" * 5_000 + b', "de": "x"}', "malformed JSON"),
    (b'{"en": "a\x00b", "de": "x"}', "malformed JSON"),  # raw control character
    (b'{"en": "a", "de": "b"', "malformed JSON"),
    (b"\xff\xfe{}", "invalid UTF-8"),
    (b'{"en": "\xc3", "de": "x"}', "invalid UTF-8"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"en": "a"}', "missing key 'de'"),
    (b'{"en": ["a"], "de": "x"}', "not a string"),
    (b'{"en": NaN, "de": "x"}', "not a string"),
]


@st.composite
def good_json_line(draw):
    """A valid record: (line bytes, source, target) as json.loads sees them."""
    source = draw(hostile_text())
    target = draw(hostile_text())
    record = {"en": source, "de": target}
    if draw(st.booleans()):
        record["id"] = draw(st.integers())
    if draw(st.integers(0, 7)) == 0:
        record["en"] = None  # null counts as an empty side
        source = ""
    # ensure_ascii writes astral characters as (valid) surrogate-pair escapes.
    line = json.dumps(record, ensure_ascii=draw(st.booleans())).encode("utf-8")
    return line, source, target


@HOSTILE
@given(
    records=st.lists(
        st.one_of(
            good_json_line().map(lambda good: ("good",) + good),
            st.sampled_from([b"", b" \t "]).map(lambda blank: ("blank", blank, "", "")),
            st.sampled_from(BAD_JSON_LINES).map(lambda bad: ("bad", bad[0], bad[1], None)),
        ),
        min_size=1,
        max_size=8,
    ),
    layout=file_layout(),
    options=filter_options,
)
def test_jsonl_reader_on_hostile_lines(tmp_path, records, layout, options):
    lines = [record[1] for record in records]
    path = write_lines(tmp_path, "corpus", ".jsonl", lines, layout)
    expected = Expected(options)
    for number, (kind, _, source_or_reason, target) in enumerate(records, start=1):
        if kind == "bad":
            expected.error = (path, number, re.escape(source_or_reason))
            break
        expected.add(source_or_reason, target)
    check_pass(read_jsonl(path, **options), expected)


def test_jsonl_surrogate_escape_names_file_line_and_key(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"en": "ok", "de": "fine"}\n{"en": "ok", "de": "bad \\udfff"}\n')
    with pytest.raises(CorpusError, match=r"c\.jsonl:2: value of 'de' is not valid Unicode: unpaired surrogate"):
        read_jsonl(path).load()
    # A surrogate pair escape is one valid character.
    path.write_text('{"en": "\\ud83d\\ude00", "de": "x"}\n')
    assert read_jsonl(path).load()[0] == [("\U0001f600", "x")]


# ---------------------------------------------------------------------------
# Tokenizer

TRAINING_PAIRS = [
    ("The small cat sees a dog.", "Die kleine Katze sieht einen Hund."),
    ("The big dog runs quickly.", "Der große Hund läuft schnell."),
    ("A red house is old.", "Ein rotes Haus ist alt."),
    ("We drink water every day.", "Wir trinken jeden Tag Wasser."),
    ("The train arrives at seven.", "Der Zug kommt um sieben an."),
    ("Москва — столица России.", "北京是中国的首都。 😀"),
]


@pytest.fixture(autouse=True, scope="module")
def _seed_and_policy():
    """Seeds once for the module instead of per test (and per example).

    `keras.utils.set_random_seed` clears TensorFlow's eager kernel cache, which
    would re-create the tokenizer's ops at every example.
    """
    keras.utils.set_random_seed(1234)
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)


@pytest.fixture(scope="module")
def tokenizer():
    # Byte fallback: unknown characters become byte pieces, so random id
    # sequences decode to invalid byte sequences that must come out as U+FFFD.
    return SubwordTokenizer.train(
        TRAINING_PAIRS, 400, byte_fallback=True, hard_vocab_limit=False, seed=0
    )


tokenizer_inputs = st.one_of(
    hostile_text(long_size=(2_000, 50_000)),
    st.text(any_character | st.just("\n"), max_size=40),
    st.binary(max_size=48),
    hostile_line_bytes(),
)


@HOSTILE
@given(texts=st.lists(tokenizer_inputs, max_size=6))
def test_tokenize_hostile_strings(tokenizer, texts):
    ids = tokenizer.tokenize(texts)
    assert ids.dtype == tf.int32 and ids.shape[0] == len(texts)
    values = ids.flat_values.numpy()
    assert ((values >= 0) & (values < tokenizer.vocabulary_size)).all()
    # Never a special id other than unk in the middle of a text.
    assert not np.isin(values, [tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id]).any()
    for text, row in zip(texts, ids.to_list()):
        alone = tokenizer.tokenize(text).numpy().tolist()
        assert alone == row
        if isinstance(text, str):
            # The SentencePiece library itself is the reference for valid text.
            assert row == tokenizer._processor.encode(text)


@HOSTILE
@given(
    rows=st.lists(
        st.lists(
            st.one_of(
                st.integers(-3, 403),  # specials, byte pieces, just out of range
                st.sampled_from([-(2**63), -(2**31) - 1, 2**31, 2**32 + 5, 2**40 + 7, 2**63 - 1]),
            ),
            max_size=12,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_detokenize_any_ids_gives_valid_utf8(tokenizer, rows):
    size = tokenizer.vocabulary_size
    outputs = tokenizer.detokenize(rows).numpy()
    assert outputs.shape == (len(rows),)
    for row, output in zip(rows, outputs):
        text = output.decode("utf-8")  # strict: raises on invalid UTF-8
        # Reference: the SentencePiece library on the documented filtering
        # (cut at EOS; pad, BOS and ids outside the vocabulary dropped).
        kept = []
        for token in row:
            if token == tokenizer.eos_id:
                break
            if 0 <= token < size and token not in (tokenizer.pad_id, tokenizer.bos_id):
                kept.append(token)
        assert text == tokenizer._processor.decode(kept)
        # A dense int64 tensor gives the same (no wrap-around to valid ids).
        if row:
            single = tokenizer.detokenize(tf.constant(row, tf.int64)).numpy()
            assert single == output


def test_detokenize_does_not_wrap_large_ids(tokenizer):
    # int64 ids that an int32 cast would turn into the valid ids 5 and 6.
    wrapped = tokenizer.detokenize(tf.constant([[2**32 + 5, 2**33 + 6]], tf.int64)).numpy()
    assert wrapped[0] == b""
    assert tokenizer.detokenize(tf.constant([[5, 6]], tf.int64)).numpy()[0] != b""


@pytest.mark.parametrize(
    "ids, message",
    [
        ([[1.5, 2.0]], "integers"),
        (np.array([[1.5]]), "integers, got float64"),
        (np.array([[True]]), "integers, got bool"),
        (tf.constant([["a"]]), "integers, got string"),
        ([["4"]], "integers"),
        ([[2**70]], "integers in the int64 range"),
        (None, "integers"),
    ],
)
def test_detokenize_rejects_non_integer_ids(tokenizer, ids, message):
    with pytest.raises(TypeError, match=r"detokenize: ids must be " + message):
        tokenizer.detokenize(ids)


@HOSTILE
@given(
    prefix=st.lists(st.text(any_character, max_size=5), max_size=3),
    text=st.text(any_character, max_size=8),
    surrogate=st.integers(0xD800, 0xDFFF),
)
def test_tokenize_names_a_text_with_a_lone_surrogate(tokenizer, prefix, text, surrogate):
    bad = text + chr(surrogate)
    with pytest.raises(ValueError, match=rf"tokenize: texts\[{len(prefix)}\] is not valid Unicode: unpaired surrogate"):
        tokenizer.tokenize(prefix + [bad, "fine"])
    with pytest.raises(ValueError, match=rf"tokenize: texts is not valid Unicode.* at character {len(text)}"):
        tokenizer.tokenize(bad)


@pytest.mark.parametrize(
    "texts, error, message",
    [
        (5, TypeError, "tokenize expects strings.*got int"),
        (None, TypeError, "tokenize expects strings.*got NoneType"),
        (["a", None], TypeError, r"texts\[1\] is NoneType, not a string"),
        (["a", b"b", 3], TypeError, r"texts\[2\] is int, not a string"),
        (np.array(["a", "b\ud800"], dtype=object), ValueError, r"texts\[1\] is not valid Unicode"),
        (tf.constant([1, 2]), TypeError, "tokenize expects strings.*got EagerTensor"),
    ],
)
def test_tokenize_rejects_non_strings_naming_the_item(tokenizer, texts, error, message):
    with pytest.raises(error, match=message):
        tokenizer.tokenize(texts)


# ---------------------------------------------------------------------------
# translate

# Untrained: the search rarely emits EOS, so outputs are capped in length.
MAX_OUTPUT_LENGTH = 5


@pytest.fixture(scope="module")
def model(tokenizer):
    keras.utils.set_random_seed(3)
    model = kt.Transformer(
        vocabulary_size=tokenizer.vocabulary_size, d_model=16, num_heads=2, d_ff=32,
        num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
    )
    model.build()
    return model


@HOSTILE
@given(
    texts=st.lists(
        st.one_of(
            hostile_text(long_size=(500, 1_500)),
            st.sampled_from(["", " ", "\t\r", "\ufeff", "\x00", "\r\n", "\u2028"]),
            st.text(any_character | st.just("\n"), max_size=30),
        ),
        max_size=6,
    ),
    beam_size=st.sampled_from([1, 2]),
)
def test_translate_hostile_batches(model, tokenizer, texts, beam_size):
    # The cut keeps the attention matrices of very long inputs small.
    options = dict(
        beam_size=beam_size, max_extra_length=2, max_output_length=MAX_OUTPUT_LENGTH, batch_size=4,
        max_source_length=64,
    )
    outputs = translate(model, tokenizer, texts, **options)
    assert isinstance(outputs, list) and len(outputs) == len(texts)
    for text, output in zip(texts, outputs):
        assert isinstance(output, str)
        output.encode("utf-8")  # strict: no lone surrogates
        if not text.strip():
            assert output == ""
    # Order kept: the reversed batch gives the reversed translations.
    assert translate(model, tokenizer, texts[::-1], **options) == outputs[::-1]


@pytest.mark.parametrize(
    "texts, error, message",
    [
        (5, TypeError, r"translate: `texts` must be a str or an iterable of str, got int"),
        (None, TypeError, r"`texts` must be .* got NoneType"),
        (b"bytes", TypeError, r"`texts` must be .* got bytes"),
        (["a", None], TypeError, r"translate: texts\[1\] is NoneType, not str"),
        (["a", b"b"], TypeError, r"texts\[1\] is bytes"),
        (["ok", "", "x\udc80y"], ValueError, r"translate: texts\[2\] is not valid Unicode: unpaired surrogate '\\udc80' at character 1"),
        ("\ud800", ValueError, r"translate: texts is not valid Unicode"),
    ],
)
def test_translate_rejects_bad_input_naming_the_argument(model, tokenizer, texts, error, message):
    with pytest.raises(error, match=message):
        translate(model, tokenizer, texts, beam_size=1, max_output_length=MAX_OUTPUT_LENGTH)


def test_translate_long_input_with_learned_positions(tokenizer):
    """Sources longer than the learned position table are cut, not an error from the backend."""
    keras.utils.set_random_seed(4)
    model = kt.Transformer(
        vocabulary_size=tokenizer.vocabulary_size, d_model=16, num_heads=2, d_ff=32,
        num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
        positional_encoding="learned", max_length=12,
    )
    model.build()
    # 11 tokens + EOS fill the 12 positions; padding to a multiple of 8 would need 16.
    texts = ["the cat " * 40, "Katze", "x" * 9]
    assert max(len(row) for row in tokenizer.tokenize(texts).to_list()) > 12
    translator = Translator(model, tokenizer, beam_size=2, max_extra_length=2)
    assert translator.max_source_length == 12
    assert all(len(row) <= 12 for row in translator.source_ids(texts))
    outputs = translator(texts)
    assert len(outputs) == 3 and all(isinstance(output, str) for output in outputs)
    # The long text translates as its first 11 tokens (and EOS) would.
    first_tokens = tokenizer.tokenize(texts[0]).numpy().tolist()[:11]
    assert translator.source_ids(texts[:1]) == [first_tokens + [tokenizer.eos_id]]
    (cut_ids,), _ = translator.translate_ids([first_tokens + [tokenizer.eos_id]])
    assert outputs[0] == tokenizer.detokenize([cut_ids]).numpy()[0].decode("utf-8")
    # A larger limit than the table is capped too.
    assert Translator(model, tokenizer, max_source_length=100).max_source_length == 12


# ---------------------------------------------------------------------------
# Exported SavedModel

EXPORT_MAX_INPUT_LENGTH = 16
EXPORT_MAX_EXTRA_LENGTH = 3


@pytest.fixture(scope="module")
def export_dir(model, tokenizer, tmp_path_factory):
    # The op check runs in tests/tf/test_export.py; here only the signatures matter.
    return export_saved_model(
        model, tokenizer, tmp_path_factory.mktemp("export"), beam_size=2,
        max_extra_length=EXPORT_MAX_EXTRA_LENGTH, max_input_length=EXPORT_MAX_INPUT_LENGTH,
        check_ops=False,
    )


@pytest.fixture(scope="module")
def loaded_export(export_dir):
    return tf.saved_model.load(export_dir)


@pytest.fixture(scope="module")
def serve(loaded_export):
    # The module's one load of the export (seconds each).
    return loaded_export.signatures["serving_default"]


HOSTILE_BYTES = st.lists(
    st.one_of(
        st.binary(max_size=40),
        hostile_line_bytes(),
        st.text(any_character | st.just("\n"), max_size=20).map(lambda text: text.encode("utf-8")),
        st.sampled_from(INVALID_UTF8 + [b"", b"\x00", BOM, b"\r\n", b" \t "]),
    ),
    max_size=6,
)


@HOSTILE
@given(texts=HOSTILE_BYTES)
def test_exported_text_signature_on_hostile_bytes(serve, tokenizer, texts):
    outputs = serve(text=tf.constant(texts, dtype=tf.string, shape=[len(texts)]))
    translations = outputs["translations"].numpy()
    scores = outputs["scores"].numpy()
    assert translations.shape == (len(texts),) and scores.shape == (len(texts),)
    assert np.isfinite(scores).all()
    longest_piece = max(len(piece.encode("utf-8")) for piece in tokenizer.vocabulary())
    token_counts = [len(row) for row in tokenizer.tokenize(texts).to_list()] if texts else []
    for translation, score, count in zip(translations, scores, token_counts):
        text = translation.decode("utf-8")  # strict: raises on invalid UTF-8
        assert len(translation) <= (EXPORT_MAX_INPUT_LENGTH + EXPORT_MAX_EXTRA_LENGTH) * longest_piece
        if count == 0:
            assert (text, score) == ("", 0.0)


@HOSTILE
@given(texts=HOSTILE_BYTES)
def test_exported_n_best_signature_on_hostile_bytes(loaded_export, tokenizer, texts):
    outputs = loaded_export.signatures["translate_n_best"](text=tf.constant(texts, dtype=tf.string, shape=[len(texts)]))
    translations, scores = outputs["translations"].numpy(), outputs["scores"].numpy()
    counts = outputs["counts"].numpy()
    assert translations.shape == scores.shape == (len(texts), 2) and counts.shape == (len(texts),)
    assert np.isfinite(scores).all() and ((counts >= 0) & (counts <= 2)).all()
    token_counts = [len(row) for row in tokenizer.tokenize(texts).to_list()] if texts else []
    for row, count, tokens in zip(translations, counts, token_counts):
        for translation in row:
            translation.decode("utf-8")  # strict
        if tokens == 0:
            assert count == 0 and list(row) == [b"", b""]


@HOSTILE
@given(sources=HOSTILE_BYTES, targets=HOSTILE_BYTES)
def test_exported_score_signature_on_hostile_bytes(loaded_export, tokenizer, sources, targets):
    count = min(len(sources), len(targets))
    sources, targets = sources[:count], targets[:count]
    score = loaded_export.signatures["score"]
    inputs = dict(source=tf.constant(sources, dtype=tf.string, shape=[count]),
                  target=tf.constant(targets, dtype=tf.string, shape=[count]))
    # A target longer than the longest translation the export makes is refused, never cut.
    limit = EXPORT_MAX_INPUT_LENGTH + EXPORT_MAX_EXTRA_LENGTH
    if count and max(len(row) for row in tokenizer.tokenize(targets).to_list()) > limit:
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"score: a target holds more than {limit} tokens"):
            score(**inputs)
        return
    outputs = score(**inputs)
    log_probs, tokens = outputs["log_probs"].numpy(), outputs["tokens"].numpy()
    assert log_probs.shape == tokens.shape == (count,)
    assert np.isfinite(log_probs).all() and (log_probs <= 0).all()
    assert ((tokens >= 1) & (tokens <= limit + 1)).all()


@pytest.fixture(scope="module")
def score_run(model, tokenizer, tmp_path_factory):
    """A run directory around the module's model, for the score command."""
    run = tmp_path_factory.mktemp("score-run")
    model.save(str(run / "model.keras"))
    tokenizer.save(str(run / "tokenizer.model"))
    return run


@HOSTILE
@given(sources=st.lists(hostile_line_bytes(long_size=(100, 400)), max_size=4),
       targets=st.lists(hostile_line_bytes(long_size=(100, 400)), max_size=4))
def test_score_command_on_hostile_files(score_run, model, tokenizer, tmp_path_factory, capsys, sources, targets):
    from keras_transformer import cli
    from keras_transformer.config import defaults
    from keras_transformer.decoding.inputs import target_length_limit

    work = tmp_path_factory.mktemp("score-files")
    source, target, output = work / "source.txt", work / "target.txt", work / "out.txt"
    source.write_bytes(b"".join(line + b"\n" for line in sources))
    target.write_bytes(b"".join(line + b"\n" for line in targets))
    argv = ["score", str(score_run), "--source", str(source), "--target", str(target), "--output", str(output)]

    def lines_of(data):
        return data.splitlines()

    bad = [(name, number) for name, data in (("--source", source.read_bytes()), ("--target", target.read_bytes()))
           for number, line in enumerate(lines_of(data), 1) if not _utf8(line)]
    if bad:
        name, number = bad[0]
        with pytest.raises(SystemExit, match=rf"{name} .* line {number}: not UTF-8"):
            cli.main(argv)
    elif len(lines_of(source.read_bytes())) != len(lines_of(target.read_bytes())):
        with pytest.raises(SystemExit, match=r"--source .* has \d+ lines but --target .* has \d+"):
            cli.main(argv)
    elif max((len(row) for row in tokenizer.tokenize(
            [line.decode("utf-8") for line in lines_of(target.read_bytes())]).to_list()), default=0) > (
            limit := target_length_limit(model, defaults()["data"]["max_length"],
                                         defaults()["decoding"]["max_extra_length"])):
        capsys.readouterr()
        assert cli.main(argv) == 2  # a target over the limit is refused, naming it
        assert f"more than the limit of {limit} tokens" in capsys.readouterr().err
    else:
        assert cli.main(argv) == 0
        rows = [line.split(" ||| ") for line in output.read_text(encoding="utf-8").splitlines()]
        assert len(rows) == len(lines_of(source.read_bytes()))
        assert all(float(row[0]) <= 0 and int(row[1]) >= 1 for row in rows)


def _utf8(data):
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ---------------------------------------------------------------------------
# Safe mode and pickle


def test_our_code_never_leaves_keras_safe_mode():
    offenders = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        # safe_mode may only be spelled out as True.
        for pattern in (r"safe_mode\s*=(?!\s*True\b)", r"enable_unsafe_deserialization"):
            if re.search(pattern, source):
                offenders.append(f"{path.relative_to(PACKAGE_DIR)}: {pattern}")
    assert offenders == []


def test_transformer_loads_in_safe_mode(model, tmp_path):
    path = str(tmp_path / "model.keras")
    model.save(path)
    source = np.array([[5, 6, 7, 3]], "int32")
    target = np.array([[2, 8, 9]], "int32")
    expected = keras.ops.convert_to_numpy(model({"source": source, "target": target}))
    for loaded in (keras.saving.load_model(path), keras.saving.load_model(path, safe_mode=True)):
        assert isinstance(loaded, kt.Transformer)
        actual = keras.ops.convert_to_numpy(loaded({"source": source, "target": target}))
        np.testing.assert_allclose(actual, expected, atol=1e-6)
    # And through a run directory, as the command line loads it.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    model.save(str(run_dir / run_data.MODEL_FILE))
    assert isinstance(run_trained.load_model(run_dir), kt.Transformer)


def test_keras_file_with_python_lambda_is_refused(tmp_path):
    # The lambda leaves a file behind whenever it runs (Keras runs it to
    # infer shapes, so rebuilding the model would run it).
    marker = tmp_path / "code-ran"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / run_data.MODEL_FILE
    # Built from source so that the path is a constant of the code (Keras
    # stores a lambda's code, not its closure).
    function = eval(f"lambda x: (open({str(marker)!r}, 'w').close(), x * 2.0)[1]")
    hostile = keras.Sequential([keras.Input((2,)), keras.layers.Lambda(function)])
    hostile.save(str(path))
    marker.unlink()
    with zipfile.ZipFile(path) as archive:
        assert '"__lambda__"' in archive.read("config.json").decode("utf-8")
    with pytest.raises(ValueError, match=r"(?is)lambda.*(safe_mode|arbitrary code)"):
        run_trained.load_model(run_dir)
    with pytest.raises(ValueError, match=r"(?is)safe_mode"):
        keras.saving.load_model(str(path))
    assert not marker.exists()
    # The refusal is safe mode's doing: unsafe loading runs the stored code.
    unsafe = keras.saving.load_model(str(path), safe_mode=False)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(unsafe(np.ones((1, 2), "float32"))), 2.0)
    assert marker.exists()


PICKLE_PATTERNS = [
    r"^\s*(import|from)\s+(pickle|_pickle|cPickle|cloudpickle|dill|marshal|shelve|joblib)\b",
    r"\b(pickle|dill|marshal|cloudpickle|joblib)\.(load|loads|dump|dumps)\b",
    r"allow_pickle\s*=\s*True",
    r"\btorch\.load\(",
    r"\byaml\.(unsafe_load|full_load)\(",
    r"Loader\s*=\s*yaml\.(Loader|UnsafeLoader|FullLoader)",
]


def test_package_sources_use_no_pickle():
    offenders = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for pattern in PICKLE_PATTERNS:
                if re.search(pattern, line):
                    offenders.append(f"{path.relative_to(PACKAGE_DIR)}:{number}: {line.strip()}")
            # yaml.load only with a loader that builds no objects (strings, lists, dicts) spelled out.
            if re.search(r"\byaml\.load\(", line) and not re.search(r"Loader\s*=\s*yaml\.(Safe|CSafe|Base|CBase)Loader\b",
                                                                  line):
                offenders.append(f"{path.relative_to(PACKAGE_DIR)}:{number}: {line.strip()}")
            # np.load only with allow_pickle=False spelled out.
            if re.search(r"\bnp\.load\(|\bnumpy\.load\(", line) and "allow_pickle=False" not in line:
                offenders.append(f"{path.relative_to(PACKAGE_DIR)}:{number}: {line.strip()}")
    assert offenders == []


@contextlib.contextmanager
def pickle_forbidden():
    """Any unpickling (pickle, numpy's allow_pickle) fails while this is active."""

    def refuse(*args, **kwargs):
        raise AssertionError("a format was unpickled")

    saved = [(module, name, getattr(module, name)) for module in (pickle, _pickle)
             for name in ("load", "loads", "Unpickler")]
    original_np_load = np.load

    def np_load(*args, **kwargs):
        if kwargs.get("allow_pickle"):
            raise AssertionError("np.load with allow_pickle=True")
        kwargs["allow_pickle"] = False
        return original_np_load(*args, **kwargs)

    try:
        for module, name, _ in saved:
            setattr(module, name, refuse)
        np.load = np_load
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
        np.load = original_np_load


def h5_values(path):
    """(name, dtype) of every dataset and attribute of an HDF5 file."""
    found = []
    with h5py.File(path, "r") as handle:
        def visit(name, item):
            if isinstance(item, h5py.Dataset):
                found.append((name, item.dtype))
            for key, value in item.attrs.items():
                found.append((f"{name}@{key}", np.asarray(value).dtype))
        handle.visititems(visit)
        for key, value in handle.attrs.items():
            found.append((f"@{key}", np.asarray(value).dtype))
    return found


def check_plain_h5(path):
    values = h5_values(path)
    assert values
    for name, dtype in values:
        # Numbers, or strings (h5py reads variable-length strings as objects).
        plain = dtype.kind in "biuf" or h5py.check_string_dtype(dtype) is not None or dtype.kind in "SU"
        assert plain, f"{path}: {name} has dtype {dtype}"


def test_our_formats_load_without_pickle(model, tokenizer, export_dir, tmp_path):
    # A run directory's files, written by our code.
    model_path = str(tmp_path / "model.keras")
    model.save(model_path)
    tokenizer_path = tokenizer.save(str(tmp_path / "tokenizer.model"))
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config_lib.defaults()))
    keras.utils.set_random_seed(5)
    trained = kt.Transformer(
        vocabulary_size=tokenizer.vocabulary_size, d_model=16, num_heads=2, d_ff=32,
        num_encoder_layers=1, num_decoder_layers=1, dropout=0.1,
    )
    trained.build()
    trained.compile(optimizer=keras.optimizers.Adam(1e-3))
    trained.optimizer.build(trained.trainable_variables)
    checkpoint = StepCheckpoint(str(tmp_path / "checkpoints"), save_every_steps=1)
    checkpoint.step = 7
    checkpoint.save(trained)
    _, checkpoint_path = checkpoint.latest()

    check_plain_h5(checkpoint_path)
    with zipfile.ZipFile(model_path) as archive:
        assert sorted(archive.namelist()) == ["config.json", "metadata.json", "model.weights.h5"]
        archive.extract("model.weights.h5", tmp_path / "unzipped")
    check_plain_h5(tmp_path / "unzipped" / "model.weights.h5")

    with pickle_forbidden():
        loaded_model = keras.saving.load_model(model_path)
        loaded_tokenizer = SubwordTokenizer.load(tokenizer_path)
        loaded_config = config_lib.load_file(config_path)
        restored = kt.Transformer.from_config(trained.get_config())
        restored.build()
        restored.compile(optimizer=keras.optimizers.Adam(1e-3))
        assert StepCheckpoint(str(tmp_path / "checkpoints"), save_every_steps=1).restore(restored) == 7
        exported = tf.saved_model.load(export_dir)
        translation = exported.signatures["serving_default"](text=tf.constant(["the cat"]))
    assert isinstance(loaded_model, kt.Transformer)
    assert loaded_tokenizer.proto == tokenizer.proto
    assert loaded_config == config_lib.defaults()
    for before, after in zip(trained.weights, restored.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(before), keras.ops.convert_to_numpy(after))
    translation["translations"].numpy()[0].decode("utf-8")
    # The guard itself works.
    with pickle_forbidden(), pytest.raises(AssertionError, match="unpickled"):
        pickle.loads(pickle.dumps([1]))
