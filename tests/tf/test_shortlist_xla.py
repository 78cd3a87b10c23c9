"""The vocabulary shortlist in the XLA SavedModel variant with int8 weights
(`export --jit-compile --quantize int8 --shortlist FILE --shortlist-size N`,
the best served path): the batch's candidates padded to a fixed
`shortlist_size` (static shapes), and the full search where a batch's union
is larger.

One child process serves the export as TF Serving would (the SignatureDefs
in a TF1 session, `benchmarks.serve_mix.SessionServer`) with XLA's module
dump on: it replays the warm-up records, then translates a batch within the
size and one past it, and counts the programs compiled. Its text is checked
against Translator on the same int8 model with the same list (within the
size) and without one (past it: the exact full search, never a cut list);
the count shows that after the warm-up neither branch compiles anything; the
export passes the op check (serving ops and int8 weights and products).

Why int8 only: the export's shortlist machinery (the static candidate list,
the fallback branch, the warm-up) does not depend on the weights' type, and
the int8 export runs all of it; float32 differs only in the embedding's
float projection onto the candidates, which tests/test_shortlist.py checks
against a search on masked logits and compiled with XLA, and test_cli's
shortlist test in a float SavedModel (the plain variant) against
Translator. One export and one served child instead of two keeps the
suite's time (issue 34). The int8 projection itself is checked against an
independent reference in test_shortlist_quantized."""

import json
import os
from pathlib import Path

import pytest
from served_model import SENTENCES, build_model, run_served_child, train_tokenizer

from keras_transformer.decoding import Translator
from keras_transformer.decoding.shortlist import Shortlist
from keras_transformer.export import export_saved_model
from keras_transformer.export.quantize import quantize_model

OPTIONS = dict(beam_size=1, max_extra_length=4)  # greedy: the cheapest export and compile; the list is the same
MAX_INPUT_LENGTH = 16  # one width bucket (16) ...
WARMUP_ROWS = 8  # ... and one row bucket (8): one XLA program
SIZE = 16  # the fixed list: holds LISTED's 15 candidates, not PAST's 25 (asserted below)
QUANTIZE = "int8"  # the headline's mode: int8 weights, activations quantized per row


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_model(tokenizer.vocabulary_size)


@pytest.fixture(scope="module")
def quantized(model):
    """The int8 copy that Translator decodes with (the export quantizes its own copy the same way)."""
    return quantize_model(model, QUANTIZE)


@pytest.fixture(scope="module")
def shortlist(tokenizer):
    pairs = [(tokenizer.tokenize([s]).to_list()[0], tokenizer.tokenize([t]).to_list()[0]) for s, t in SENTENCES]
    vocabulary = tokenizer.vocabulary_size
    return Shortlist.build(pairs, vocabulary, vocabulary, per_source=3, frequent=4)


def export(model, tokenizer, base, shortlist, jit_compile, check_ops=False, **options):
    return export_saved_model(model, tokenizer, base, max_input_length=MAX_INPUT_LENGTH, jit_compile=jit_compile,
                              warmup_rows=WARMUP_ROWS, check_ops=check_ops, shortlist=shortlist, **OPTIONS,
                              **options)


def translator(model, tokenizer, shortlist=None):
    return Translator(model, tokenizer, max_source_length=MAX_INPUT_LENGTH, shortlist=shortlist, **OPTIONS)


LISTED = ["The children play in the garden.", "The big dog runs quickly."]
PAST = [source for source, _ in SENTENCES]

# The served side: warm-up replay, LISTED, PAST, and the programs compiled meanwhile.
SERVER_SCRIPT = r'''
import numpy as np
from benchmarks.serve_mix import SessionServer

server = SessionServer(export_dir)
counts = {"start": programs()}
server.warm_up()
counts["warm"] = programs()
texts, overflow = {}, {}
for name, batch in json.loads(argument).items():
    served = server.predict("serving_default", {"text": [t.encode() for t in batch]})
    texts[name] = [t.decode() for t in served["translations"]]
    overflow[name] = [bool(flag) for flag in served["shortlist_overflow"]]
    ids = server.predict("translate_ids", {"source_ids": np.array([[5, 6, 3]] * len(batch), "int32")})
    overflow[name + " ids"] = [bool(flag) for flag in ids["shortlist_overflow"]]
counts["served"] = programs()
print(json.dumps({"counts": counts, "texts": texts, "overflow": overflow}))
'''


@pytest.fixture(scope="module")
def server(model, tokenizer, shortlist, tmp_path_factory):
    """(export directory, the child's {"counts", "texts"}). The export quantizes a copy of `model` and
    runs the op check (`check_ops`: TF Serving's ops, int8 kernels and int8 products), as the CLI does."""
    work = tmp_path_factory.mktemp("xla")
    export_dir = export(model, tokenizer, work / "models", shortlist, True, check_ops=True, shortlist_size=SIZE,
                        quantize=QUANTIZE)
    return export_dir, run_served_child(SERVER_SCRIPT, work, export_dir, json.dumps({"listed": LISTED, "past": PAST}))


@pytest.fixture(scope="module")
def full_texts(quantized, tokenizer):
    """Translator on the int8 copy without a list: {"listed": ..., "past": ...} (one search; rows do not
    depend on each other)."""
    texts = translator(quantized, tokenizer).translate(LISTED + PAST)
    return {"listed": texts[: len(LISTED)], "past": texts[len(LISTED):]}


def test_int8_xla_variant_gives_translators_text_with_the_list(quantized, tokenizer, shortlist, server,
                                                               full_texts):
    export_dir, served = server
    with_list = translator(quantized, tokenizer, shortlist)
    _, count = shortlist.candidates(with_list.source_ids(LISTED))
    assert count <= SIZE  # the list's branch
    expected = with_list.translate(LISTED)
    assert expected != full_texts["listed"]  # the list changes this model's text: the served text shows which ran
    assert served["texts"]["listed"] == expected
    info = json.loads(Path(export_dir, "assets.extra", "keras_transformer_export.json").read_text())
    assert info["search"]["shortlist"]["size"] == SIZE and info["quantization"] == QUANTIZE


def test_a_batch_past_the_size_takes_the_full_int8_search(quantized, tokenizer, shortlist, server, full_texts):
    with_list = translator(quantized, tokenizer, shortlist)
    _, count = shortlist.candidates(with_list.source_ids(PAST))
    assert count > SIZE
    assert server[1]["texts"]["past"] == full_texts["past"]
    # ... and says so, per row (one list per batch), where the list's branch says it did not.
    assert server[1]["overflow"]["past"] == [True] * len(PAST)
    assert server[1]["overflow"]["listed"] == [False] * len(LISTED)
    assert server[1]["overflow"]["listed ids"] == [False] * len(LISTED)  # the same output from translate_ids


def test_no_compile_after_warmup_on_either_branch(server):
    counts = server[1]["counts"]
    assert counts["start"] == 0 and counts["warm"] >= 1  # the dump sees the warm-up's compile
    assert counts["served"] == counts["warm"], counts  # neither branch waited on a compile


@pytest.mark.parametrize("size, message", [
    (0, "`shortlist_size` must be an int >= "),
    (-3, "`shortlist_size` must be an int >= "),
    (4, "`shortlist_size` must be an int >= .* always-kept pieces, special ids included, and one more"),
    (True, "`shortlist_size` must be an int"),
    ("32", "`shortlist_size` must be an int"),
])
def test_bad_shortlist_size_is_refused_by_name(size, message, model, tokenizer, shortlist, tmp_path):
    with pytest.raises(ValueError, match=message):
        export(model, tokenizer, tmp_path, shortlist, True, shortlist_size=size)
    with pytest.raises(ValueError, match="`shortlist_size` .* needs `shortlist` and jit_compile=True"):
        export(model, tokenizer, tmp_path, shortlist, False, shortlist_size=SIZE)
    assert not os.listdir(tmp_path) or os.listdir(tmp_path / "translator") == []
