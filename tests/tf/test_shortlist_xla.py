"""The vocabulary shortlist in the XLA SavedModel variant: the batch's
candidates padded to a fixed `shortlist_size` (static shapes), and the full
search where a batch's union is larger.

One child process serves the export as TF Serving would (the SignatureDefs
in a TF1 session, `benchmarks.serve_mix.SessionServer`) with XLA's module
dump on: it replays the warm-up records, then translates a batch within the
size and one past it, and counts the programs compiled. Its text is checked
against Translator with the same list (within the size) and without one
(past it: the exact full search, never a cut list); the count shows that
after the warm-up neither branch compiles anything. (The plain variant with
a list equals Translator's text in test_cli's shortlist test.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest

import keras_transformer as kt
from keras_transformer.data import SubwordTokenizer
from keras_transformer.decoding import Translator
from keras_transformer.decoding.shortlist import Shortlist
from keras_transformer.export import export_saved_model

ROOT = Path(__file__).resolve().parents[2]

SENTENCES = [
    ("The small cat sees a dog.", "Die kleine Katze sieht einen Hund."),
    ("The big dog runs quickly.", "Der große Hund läuft schnell."),
    ("A red house is old.", "Ein rotes Haus ist alt."),
    ("The woman reads a book.", "Die Frau liest ein Buch."),
    ("The children play in the garden.", "Die Kinder spielen im Garten."),
]
OPTIONS = dict(beam_size=1, max_extra_length=4)  # greedy: the cheapest export and compile; the list is the same
MAX_INPUT_LENGTH = 16  # one width bucket (16) ...
WARMUP_ROWS = 8  # ... and one row bucket (8): one XLA program
SIZE = 16  # the fixed list: holds LISTED's 15 candidates, not PAST's 25 (asserted below)


@pytest.fixture(autouse=True)
def _no_reseed():
    """The suite reseeds per test (resetting TF's caches); the fixtures seed once."""
    yield


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    tokenizer = SubwordTokenizer.train(SENTENCES * 4, 400, byte_fallback=True, hard_vocab_limit=False, seed=1)
    return SubwordTokenizer.load(tokenizer.save(tmp_path_factory.mktemp("tokenizer") / "spm.model"))


@pytest.fixture(scope="module")
def model(tokenizer):
    keras.utils.set_random_seed(3)
    model = kt.Transformer(vocabulary_size=tokenizer.vocabulary_size, d_model=16, num_heads=2, d_ff=32,
                           num_encoder_layers=1, num_decoder_layers=1, dropout=0.0)
    model.build()
    return model


@pytest.fixture(scope="module")
def shortlist(tokenizer):
    pairs = [(tokenizer.tokenize([s]).to_list()[0], tokenizer.tokenize([t]).to_list()[0]) for s, t in SENTENCES]
    vocabulary = tokenizer.vocabulary_size
    return Shortlist.build(pairs, vocabulary, vocabulary, per_source=3, frequent=4)


def export(model, tokenizer, base, shortlist, jit_compile, **options):
    return export_saved_model(model, tokenizer, base, max_input_length=MAX_INPUT_LENGTH, jit_compile=jit_compile,
                              warmup_rows=WARMUP_ROWS, check_ops=False, shortlist=shortlist, **OPTIONS, **options)


def translator(model, tokenizer, shortlist=None):
    return Translator(model, tokenizer, max_source_length=MAX_INPUT_LENGTH, shortlist=shortlist, **OPTIONS)


LISTED = ["The children play in the garden.", "The big dog runs quickly."]
PAST = [source for source, _ in SENTENCES]

# The served side: warm-up replay, LISTED, PAST, and the programs compiled meanwhile.
SERVER_SCRIPT = r'''
import json, os, sys
sys.path.insert(0, sys.argv[3])
from benchmarks.serve_mix import SessionServer

export_dir, dump_dir = sys.argv[1:3]
def programs():
    return len({name.split(".")[0] for name in os.listdir(dump_dir) if name.startswith("module_")}) if os.path.isdir(dump_dir) else 0

server = SessionServer(export_dir)
counts = {"start": programs()}
server.warm_up()
counts["warm"] = programs()
texts = {}
for name, batch in json.loads(sys.argv[4]).items():
    served = server.predict("serving_default", {"text": [t.encode() for t in batch]})["translations"]
    texts[name] = [t.decode() for t in served]
counts["served"] = programs()
print(json.dumps({"counts": counts, "texts": texts}))
'''


@pytest.fixture(scope="module")
def server(model, tokenizer, shortlist, tmp_path_factory):
    """(export directory, the child's {"counts", "texts"})."""
    work = tmp_path_factory.mktemp("xla")
    export_dir = export(model, tokenizer, work / "models", shortlist, True, shortlist_size=SIZE)
    script, dump = work / "server.py", work / "dump"
    script.write_text(SERVER_SCRIPT)
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", XLA_FLAGS=f"--xla_dump_to={dump}")
    completed = subprocess.run([sys.executable, str(script), export_dir, str(dump), str(ROOT),
                                json.dumps({"listed": LISTED, "past": PAST})],
                               env=environment, capture_output=True, text=True, timeout=400)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return export_dir, json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def full_texts(model, tokenizer):
    """Translator without a list: {"listed": ..., "past": ...} (one search; rows do not depend on each other)."""
    texts = translator(model, tokenizer).translate(LISTED + PAST)
    return {"listed": texts[: len(LISTED)], "past": texts[len(LISTED):]}


def test_xla_variant_gives_translators_text_with_the_list(model, tokenizer, shortlist, server, full_texts):
    export_dir, served = server
    with_list = translator(model, tokenizer, shortlist)
    _, count = shortlist.candidates(with_list.source_ids(LISTED))
    assert count <= SIZE  # the list's branch
    expected = with_list.translate(LISTED)
    assert expected != full_texts["listed"]  # the list changes this model's text: the served text shows which ran
    assert served["texts"]["listed"] == expected
    info = json.loads(Path(export_dir, "assets.extra", "keras_transformer_export.json").read_text())
    assert info["search"]["shortlist"]["size"] == SIZE


def test_a_batch_past_the_size_takes_the_full_search(model, tokenizer, shortlist, server, full_texts):
    with_list = translator(model, tokenizer, shortlist)
    _, count = shortlist.candidates(with_list.source_ids(PAST))
    assert count > SIZE
    assert server[1]["texts"]["past"] == full_texts["past"]


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
