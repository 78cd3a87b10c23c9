"""TF Serving warm-up records of the SavedModel export.

The records are parsed with `tensorflow-serving-api`'s own protos, replayed
against the SignatureDefs in a TF1 session (what the server does at load
time), and checked to cover every padded (rows, source length) shape the XLA
variant compiles for requests of up to `warmup_rows` rows. A child process
with XLA's module dump on shows that after the replay no request of the
covered sizes compiles anything, and that one past them does.
"""

import json
import os
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from served_model import (ROOT, XLA_CACHE_FLAG, batching_parameters_class, build_model, run_served_child,
                          train_tokenizer)

from keras_transformer.export import batching as batching_lib
from keras_transformer.export import export_saved_model
from keras_transformer.export import warmup as warmup_lib

sys.path.insert(0, str(ROOT))

from benchmarks.serve_mix import SessionServer, read_warmup_records  # noqa: E402
from required_imports import required  # noqa: E402

# tensorflow-serving-api (the test extra); under CI=true a failed import fails the module instead of skipping it.
prediction_log_pb2 = required("tensorflow_serving.apis.prediction_log_pb2")

MAX_INPUT_LENGTH = 20  # width buckets 16 and 32
WARMUP_ROWS = 12  # row buckets 8 and 16
EXTRA = 4
SPECIALS = (0, 1, 2, 3)  # pad, unk, bos, eos
ALL_SIGNATURES = {"serving_default", "translate_ids", "translate_ids_with_lengths", "translate_n_best", "score"}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_model(tokenizer.vocabulary_size)


def export(model, tokenizer, base, jit_compile):
    return export_saved_model(model, tokenizer, base, beam_size=2, max_extra_length=EXTRA,
                              max_input_length=MAX_INPUT_LENGTH, jit_compile=jit_compile,
                              warmup_rows=WARMUP_ROWS, check_ops=False)


@pytest.fixture(scope="module")
def plain_dir(model, tokenizer, tmp_path_factory):
    return export(model, tokenizer, tmp_path_factory.mktemp("plain"), False)


@pytest.fixture(scope="module")
def xla_dir(model, tokenizer, tmp_path_factory):
    return export(model, tokenizer, tmp_path_factory.mktemp("xla"), True)


def raw_records(export_dir):
    path = os.path.join(export_dir, "assets.extra", "tf_serving_warmup_requests")
    return [prediction_log_pb2.PredictionLog.FromString(r) for r in tf.compat.v1.io.tf_record_iterator(path)]


def served_shape(source_ids):
    """The padded shape `translate_ids` gives XLA for these ids (specials dropped, cut, EOS appended)."""
    ids = np.asarray(source_ids)
    tokens = [sum(1 for t in row if t not in SPECIALS) for row in ids]
    width = min(max(tokens), MAX_INPUT_LENGTH - 1) + 1
    return warmup_lib.padded_shape(len(ids), width, MAX_INPUT_LENGTH)


def test_records_parse_as_prediction_logs(plain_dir, xla_dir):
    for export_dir in (plain_dir, xla_dir):
        logs = raw_records(export_dir)
        assert 0 < len(logs) <= 1000
        signatures = set()
        for log in logs:
            assert log.WhichOneof("log_type") == "predict_log"
            spec = log.predict_log.request.model_spec
            assert spec.name == "translator"
            signatures.add(spec.signature_name)
        assert signatures == ALL_SIGNATURES
    # The plain variant: each signature once.
    plain = [log.predict_log.request.model_spec.signature_name for log in raw_records(plain_dir)]
    assert sorted(plain) == sorted(ALL_SIGNATURES)


def test_records_name_the_signatures_inputs(xla_dir):
    loaded = tf.saved_model.load(xla_dir)
    for signature, inputs in read_warmup_records(xla_dir):
        expected = loaded.signatures[signature].structured_input_signature[1]
        assert set(inputs) == set(expected), signature
        for key, value in inputs.items():
            assert tf.as_dtype(value.dtype) == expected[key].dtype, (signature, key)


def test_records_run_against_the_signature_defs(plain_dir):
    """Replayed as TF Serving does: the SignatureDefs in a TF1 session, each request's outputs one row per input row.

    The XLA variant's records are replayed so, with the same checks, by test_no_compile_after_warmup's
    child (one replay compiles each padded shape; a second one here would compile them all again)."""
    server = SessionServer(plain_dir)
    try:
        requests = read_warmup_records(plain_dir)
        # The plain variant: one request per signature (none replayed would pass the loop below).
        assert sorted(signature for signature, _ in requests) == sorted(ALL_SIGNATURES)
        for signature, inputs in requests:
            outputs = server.predict(signature, inputs)
            rows = len(next(iter(inputs.values())))
            for key, value in outputs.items():
                assert len(value) == rows, (signature, key)
        assert len(server.warm_up()) == len(requests)
        # The batching parameters' largest batch (the plain variant allows any size up to it) runs too.
        largest = read_batching_parameters(plain_dir).max_batch_size.value
        outputs = server.predict("translate_ids", {"source_ids": np.full((largest, 3), 7, "int32")})
        assert all(len(value) == largest for value in outputs.values())
    finally:
        server.close()


def test_xla_records_cover_every_padded_shape(xla_dir):
    needed = {warmup_lib.padded_shape(rows, width, MAX_INPUT_LENGTH)
              for rows in range(1, WARMUP_ROWS + 1) for width in range(1, MAX_INPUT_LENGTH + 1)}
    assert needed == {(8, 16), (8, 32), (16, 16), (16, 32)}
    warmed = [served_shape(inputs["source_ids"]) for signature, inputs in read_warmup_records(xla_dir)
              if signature == "translate_ids"]
    assert needed <= set(warmed)
    # One record per shape (beyond the one-per-signature request).
    assert len(warmed) == len(needed) + 1
    info = json.loads(Path(xla_dir, "assets.extra", "keras_transformer_export.json").read_text())
    assert {tuple(shape) for shape in info["warmup"]["xla_shapes"]} == needed
    assert info["warmup"]["rows"] == WARMUP_ROWS
    # What the compiled search does not cover: in an int8 export these run Keras' generic int8 kernel.
    assert info["plain_graph_signatures"] == ["translate_n_best", "score"]
    assert info["search"]["xla_phase_buckets"] == 1  # the default: every phase decodes the whole request


def test_plain_variant_has_no_shape_records(plain_dir):
    info = json.loads(Path(plain_dir, "assets.extra", "keras_transformer_export.json").read_text())
    assert info["warmup"]["xla_shapes"] == [] and info["plain_graph_signatures"] == "all"
    assert info["search"]["xla_phase_buckets"] == 1


def test_padding_rule():
    assert [warmup_lib.padded_rows(r) for r in (1, 7, 8, 9, 16, 17, 33, 64, 65)] == [8, 8, 8, 16, 16, 32, 64, 64, 128]
    # Source lengths: powers of two from 16, the last bucket the input limit rounded up to a multiple of 16.
    assert [warmup_lib.padded_width(w, 256) for w in (1, 16, 17, 32, 33, 65, 128, 129, 256)] == [
        16, 16, 32, 32, 64, 128, 128, 256, 256]
    assert [warmup_lib.padded_width(w, 100) for w in (33, 64, 65, 100)] == [64, 64, 112, 112]
    assert [warmup_lib.padded_width(w, 40) for w in (16, 17, 33, 40)] == [16, 32, 48, 48]
    assert warmup_lib.row_buckets(64) == [8, 16, 32, 64]
    assert warmup_lib.row_buckets(65) == [8, 16, 32, 64, 128]
    assert warmup_lib.row_buckets(3) == [8]
    assert warmup_lib.width_buckets(256) == [16, 32, 64, 128, 256]
    assert warmup_lib.width_buckets(128) == [16, 32, 64, 128] and warmup_lib.width_buckets(100) == [16, 32, 64, 112]
    assert warmup_lib.width_buckets(16) == [16] and warmup_lib.width_buckets(3) == [16]
    # So any warm-up fits TF Serving's 1,000 records: int32 rows and an int32 input limit.
    assert len(warmup_lib.row_buckets(2**30, 1)) * len(warmup_lib.width_buckets(2**31 - 1)) + 5 < 1000
    # An export's smaller first bucket (xla_min_rows).
    assert [warmup_lib.padded_rows(r, 1) for r in (1, 2, 3, 5, 9)] == [1, 2, 4, 8, 16]
    assert warmup_lib.row_buckets(12, 2) == [2, 4, 8, 16] and warmup_lib.row_buckets(1, 1) == [1]
    assert warmup_lib.pad_for_xla(tf.constant([[5, 3]]), 32, 1).numpy().shape == (1, 16)
    assert warmup_lib.pad_for_xla(tf.constant([[5, 3]] * 3), 32, 2).numpy().shape == (4, 16)
    # The graph op the XLA variant runs pads as the Python rule says.
    for rows, width, limit in ((1, 1, 32), (8, 16, 32), (9, 17, 32), (33, 5, 32), (64, 40, 256), (3, 65, 100),
                               (2, 100, 100), (5, 33, 40)):
        ids = np.full((rows, width), 5, np.int32)
        padded = warmup_lib.pad_for_xla(tf.constant(ids), limit).numpy()
        assert padded.shape == warmup_lib.padded_shape(rows, width, limit)
        np.testing.assert_array_equal(padded[:rows, :width], ids)
        assert (padded[rows:, 0] == 3).all() and (padded[rows:, 1:] == 0).all() and (padded[:, width:] == 0).all()


def test_smaller_row_buckets_follow_through(model, tokenizer, tmp_path):
    """xla_min_rows=1: the warm-up records, the export info's shapes and the batching file all start at one
    row (what the signatures pad to: test_padding_rule); the option is refused by name where it cannot apply."""
    requests = warmup_lib.warmup_requests(["translate_ids"], jit_compile=True, warmup_rows=WARMUP_ROWS,
                                          max_input_length=MAX_INPUT_LENGTH, vocabulary_size=100, min_rows=1)
    shapes = [warmup_lib.padded_shape(*np.shape(inputs["source_ids"]), MAX_INPUT_LENGTH, 1)
              for _, inputs in requests[1:]]
    assert sorted(set(shapes)) == [(rows, width) for rows in (1, 2, 4, 8, 16) for width in (16, 32)]
    parameters = batching_lib.batching_parameters(jit_compile=True, warmup_rows=WARMUP_ROWS, xla_min_rows=1)
    assert parameters["allowed_batch_sizes"] == [1, 2, 4, 8, 16] and parameters["max_batch_size"] == 16
    for kwargs, message in ((dict(jit_compile=True, xla_min_rows=3), "`xla_min_rows` must be one of"),
                            (dict(jit_compile=True, xla_min_rows=True), "`xla_min_rows` must be one of"),
                            (dict(xla_min_rows=1), "`xla_min_rows` .* needs jit_compile=True"),
                            (dict(xla_phase_buckets=2), "`xla_phase_buckets` .* needs jit_compile=True"),
                            (dict(jit_compile=True, xla_phase_buckets=0), "`xla_phase_buckets` must be")):
        with pytest.raises(ValueError, match=message):
            export_saved_model(model, tokenizer, tmp_path, max_input_length=MAX_INPUT_LENGTH, **kwargs)
    assert not os.listdir(tmp_path) or os.listdir(tmp_path / "translator") == []


@pytest.mark.parametrize("rows, message", [
    (0, "`warmup_rows` must be an int >= 1"),
    (-4, "`warmup_rows` must be an int >= 1"),
    (True, "`warmup_rows` must be an int >= 1"),
    ("64", "`warmup_rows` must be an int >= 1"),
])
def test_bad_warmup_rows(rows, message, model, tokenizer, tmp_path):
    with pytest.raises(ValueError, match=message):
        export_saved_model(model, tokenizer, tmp_path, max_input_length=1024, jit_compile=True, warmup_rows=rows)
    assert not os.listdir(tmp_path) or os.listdir(tmp_path / "translator") == []


def test_the_plain_variants_records_do_not_grow_with_warmup_rows(model, tokenizer, tmp_path):
    version_dir = export_saved_model(model, tokenizer, tmp_path, beam_size=1, max_extra_length=EXTRA,
                                     max_input_length=MAX_INPUT_LENGTH, warmup_rows=2**20, check_ops=False)
    assert len(raw_records(version_dir)) == 4  # greedy: no n-best signature


# A server process with XLA's dump on: how many programs were compiled after
# the warm-up replay, after requests of every covered size, and after one request past them.
# What both server children below start with: the served loader, and one fixed request whose answer a
# restarted server must repeat.
SERVER_HELPERS = r'''
from benchmarks.serve_mix import SessionServer, read_warmup_records
import numpy as np

def fixed_request(server):
    """One request of ids and one of texts, as JSON (a restarted server must answer them alike)."""
    ids = np.array([[9, 10, 11, 12, 3], [13, 14, 3, 0, 0]], "int32")
    texts = server.predict("serving_default", {"text": [b"the small cat sees a dog", b"a book"]})["translations"]
    return {"ids": np.asarray(server.predict("translate_ids", {"source_ids": ids})["ids"]).tolist(),
            "texts": [text.decode() for text in np.asarray(texts).tolist()]}
'''
COMPILES_SCRIPT = SERVER_HELPERS + r'''
server = SessionServer(export_dir)
counts = {"start": programs()}
# The warm-up replay (SessionServer.warm_up's loop), keeping each request's outputs: one row per input row.
requests = read_warmup_records(export_dir)
wrong_rows = []
for signature, inputs in requests:
    rows = len(next(iter(inputs.values())))
    outputs = server.predict(signature, inputs)
    wrong_rows += [[signature, key] for key, value in outputs.items() if len(value) != rows]
counts["warm"] = programs()
rng = np.random.default_rng(0)
words = "the small cat sees a big dog and the woman reads a book in the garden".split()
for rows in range(1, int(argument) + 1):
    length = int(rng.integers(1, 40))
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, length + 1)))).encode() for _ in range(rows)]
    server.predict("serving_default", {"text": texts})
    ids = rng.integers(4, 50, size=(rows, int(rng.integers(1, 40)))).astype("int32")
    server.predict("translate_ids", {"source_ids": ids})
# Each batch size the batching parameters allow, as the server pads a merged batch's ids (its first id).
import re
allowed = [int(size) for size in re.findall(r"^allowed_batch_sizes: (\d+)$",
                                              open(os.path.join(export_dir, "assets.extra", "batching_parameters.txt")).read(),
                                              re.M)]
for size in allowed:
    ids = np.concatenate([[[9, 10, 11, 3]], np.full((size - 1, 4), 9)]).astype("int32")
    outputs = server.predict("translate_ids", {"source_ids": ids})
    wrong_rows += [["allowed", size, key] for key, value in outputs.items() if len(value) != size]
counts["covered"] = programs()
server.predict("translate_ids", {"source_ids": np.full((int(argument) + 5, 3), 7, "int32")})
counts["past"] = programs()
print(json.dumps(dict(counts, requests=len(requests), wrong_rows=wrong_rows, allowed=allowed,
                      answer=fixed_request(server))))
'''


@pytest.fixture(scope="module")
def xla_cache(tmp_path_factory):
    """A directory for TF's persistent XLA cache (`TF_XLA_FLAGS`, as docs/serving.md gives it for
    tensorflow_model_server), empty until `served_counts`' server fills it."""
    return tmp_path_factory.mktemp("xla-cache")


@pytest.fixture(scope="module")
def served_counts(xla_dir, xla_cache, tmp_path_factory):
    """COMPILES_SCRIPT's counts from a server process that keeps its programs in `xla_cache`."""
    return run_served_child(COMPILES_SCRIPT, tmp_path_factory.mktemp("served"), xla_dir, WARMUP_ROWS,
                            TF_XLA_FLAGS=f"{XLA_CACHE_FLAG}={xla_cache}")


def test_no_compile_after_warmup(xla_dir, served_counts):
    counts = served_counts
    # The replay ran every record, each answered one row per input row.
    assert counts["requests"] == len(read_warmup_records(xla_dir)) and counts["wrong_rows"] == []
    # Every batch size the batching parameters allow ran, without a compile (below).
    assert counts["allowed"] == [8, 16]
    assert counts["start"] == 0
    assert counts["warm"] >= 4  # one program per padded shape (at least)
    assert counts["covered"] == counts["warm"], counts  # no request waited on a compile
    assert counts["past"] > counts["covered"], counts  # the count does see a new shape's compile


def read_batching_parameters(export_dir):
    from google.protobuf import text_format

    text = Path(export_dir, batching_lib.BATCHING_PATH).read_text()
    return text_format.Parse(text, batching_parameters_class()())  # strict: an unknown field fails


def test_batching_parameters_fit_the_row_buckets(plain_dir, xla_dir):
    """The export's batching file parses as TF Serving's BatchingParameters and fits the export: the XLA
    variant's row buckets as the allowed sizes (the last one the largest, as BatchingSession requires), no
    allowed sizes for the plain graph; padding on for `translate_ids` (test_export's server-padding tests).
    Each allowed size runs through the signature: test_no_compile_after_warmup (XLA), and
    test_records_run_against_the_signature_defs (plain, its max_batch_size)."""
    xla = read_batching_parameters(xla_dir)
    assert list(xla.allowed_batch_sizes) == warmup_lib.row_buckets(WARMUP_ROWS) == [8, 16]
    assert xla.max_batch_size.value == xla.allowed_batch_sizes[-1]
    plain = read_batching_parameters(plain_dir)
    assert list(plain.allowed_batch_sizes) == [] and plain.max_batch_size.value == WARMUP_ROWS
    for parameters, export_dir in ((xla, xla_dir), (plain, plain_dir)):
        assert parameters.pad_variable_length_inputs
        assert parameters.num_batch_threads.value >= 1 and parameters.batch_timeout_micros.value > 0
        info = json.loads(Path(export_dir, "assets.extra", "keras_transformer_export.json").read_text())
        assert info["batching_parameters"]["max_batch_size"] == parameters.max_batch_size.value
    # The parser is strict: a misspelt field fails.
    from google.protobuf import text_format

    with pytest.raises(text_format.ParseError):
        text_format.Parse("max_batch_sizes { value: 8 }", batching_parameters_class()())


# A restarted server on the cache the first one filled: what its warm-up replay compiled, and its answer.
RESTART_SCRIPT = SERVER_HELPERS + r'''
server = SessionServer(export_dir)
for signature, inputs in read_warmup_records(export_dir):
    server.predict(signature, inputs)
print(json.dumps({"warm": programs(), "answer": fixed_request(server)}))
'''


def test_a_persistent_xla_cache_skips_every_compile_of_a_restart(xla_dir, xla_cache, served_counts, tmp_path):
    """The XLA variant's warm-up compiles one program per padded shape; with TF's persistent XLA
    cache a restarted server reads them back instead: its replay compiles
    nothing, and it answers as the first process did."""
    kept = sorted(os.listdir(xla_cache))
    assert len(kept) >= served_counts["past"], kept  # every program the first server compiled was kept
    restart = run_served_child(RESTART_SCRIPT, tmp_path, xla_dir, 0,
                               TF_XLA_FLAGS=f"{XLA_CACHE_FLAG}={xla_cache}")
    assert restart["warm"] == 0, restart  # the restart compiled nothing
    assert restart["answer"] == served_counts["answer"]
    assert sorted(os.listdir(xla_cache)) == kept  # and wrote no new program


def test_phase_buckets_give_the_in_process_translations(model, tokenizer, tmp_path):
    """xla_phase_buckets=3: after the first phase (16 positions) the 12 short sources (limit 8) are done, so the
    later phase decodes a quarter bucket of the 16 rows (the mechanism: tests/test_row_buckets.py). The
    served ids and scores are the plain in-process search's."""
    from keras_transformer.decoding import beam_search

    export_dir = export_saved_model(model, tokenizer, tmp_path, beam_size=2, max_extra_length=EXTRA,
                                    max_input_length=MAX_INPUT_LENGTH, jit_compile=True, xla_phase_buckets=3,
                                    warmup_rows=8, check_ops=False)
    info = json.loads(Path(export_dir, "assets.extra", "keras_transformer_export.json").read_text())
    assert info["search"]["xla_phase_buckets"] == 3
    rng = np.random.default_rng(0)
    lengths = [3] * 12 + [MAX_INPUT_LENGTH - 1] * 4
    ids = np.zeros((16, MAX_INPUT_LENGTH - 1), np.int32)
    for row, length in zip(rng.permutation(16), lengths):
        ids[row, :length] = rng.integers(4, tokenizer.vocabulary_size, length)
    served = tf.saved_model.load(export_dir).signatures["translate_ids"](source_ids=tf.constant(ids))
    with_eos = np.zeros((16, MAX_INPUT_LENGTH), np.int32)  # what the signature searches: the tokens, then EOS
    for row in range(16):
        tokens = ids[row][ids[row] > 0]
        with_eos[row, :len(tokens) + 1] = list(tokens) + [3]
    expected = beam_search(model, with_eos, beam_size=2, max_extra_length=EXTRA, jit_compile=False)
    expected_ids = keras.ops.convert_to_numpy(expected["ids"])
    width = min(served["ids"].shape[1], expected_ids.shape[1])
    np.testing.assert_array_equal(served["ids"].numpy()[:, :width], expected_ids[:, :width])
    assert not served["ids"].numpy()[:, width:].any() and not expected_ids[:, width:].any()
    np.testing.assert_allclose(served["scores"].numpy(), keras.ops.convert_to_numpy(expected["scores"]), atol=1e-4)
