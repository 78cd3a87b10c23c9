"""Export to TensorFlow Serving: layout, signatures, a server without Python, ops, bad input.

No tensorflow_model_server binary can be installed here, so the tests use the
stand-ins that exercise the same contract:

- a fresh interpreter that cannot import keras, keras_transformer or the TF
  Text Python package (they are blocked), loads TF Text's compiled op
  libraries the way TF Serving links them, and calls both signatures through
  `loaded.signatures[...]`;
- the same process runs the SignatureDefs in graph mode as TF Serving does
  (`tf.compat.v1.saved_model.loader.load` + `Session.run` on the tensor names
  of the SignatureDef, the path of `saved_model_cli run`);
- `check_serving_ops` on the export's op list.

Exported outputs are compared with the in-process search on the same model.
The model has a random output bias (Marian's `final_logits_bias`), so every
signature, plain and XLA, is checked with it; its int8 export too.
"""

import base64
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data import SubwordTokenizer
from keras_transformer.decoding import Translator, beam_search, greedy_search, phases, translate
from keras_transformer.export import (
    ExportDirectoryError,
    ServingOpsError,
    check_serving_ops,
    export_saved_model,
    list_ops,
    next_version,
)
from keras_transformer.export.opcheck import TF_TEXT_OPS
from keras_transformer.export.signatures import SignatureFunctions

BEAM_SIZE = 4
ALPHA = 0.6
# Both exports here rank by the "length" rule (log P / length ** alpha), which every in-process
# comparison below is given too; the other exports of the suite (test_quantize, test_warmup,
# test_shortlist_xla, test_cli, ...) keep the default, GNMT's penalty.
RULE = "length"
MAX_EXTRA_LENGTH = 6
MAX_INPUT_LENGTH = 12
EOS = 3

SENTENCES = [
    ("The small cat sees a dog.", "Die kleine Katze sieht einen Hund."),
    ("The big dog runs quickly.", "Der große Hund läuft schnell."),
    ("A red house is old.", "Ein rotes Haus ist alt."),
    ("The green cat walks today.", "Die grüne Katze geht heute."),
    ("The old man sees the new house.", "Der alte Mann sieht das neue Haus."),
    ("A small dog sees a big cat.", "Ein kleiner Hund sieht eine große Katze."),
    ("The woman reads a book.", "Die Frau liest ein Buch."),
    ("The children play in the garden.", "Die Kinder spielen im Garten."),
    ("We drink water every day.", "Wir trinken jeden Tag Wasser."),
    ("The train arrives at seven.", "Der Zug kommt um sieben an."),
    ("My brother lives in Berlin.", "Mein Bruder wohnt in Berlin."),
    ("It is cold and it rains.", "Es ist kalt und es regnet."),
    ("She writes a long letter.", "Sie schreibt einen langen Brief."),
    ("The teacher opens the door.", "Der Lehrer öffnet die Tür."),
    ("Three birds sing in the tree.", "Drei Vögel singen im Baum."),
    ("The shop closes at eight.", "Der Laden schließt um acht."),
    ("I like green tea.", "Ich mag grünen Tee."),
    ("The car is fast and new.", "Das Auto ist schnell und neu."),
    ("Our friends come tomorrow.", "Unsere Freunde kommen morgen."),
    ("The sun shines over the city.", "Die Sonne scheint über der Stadt."),
]

NORMAL_TEXTS = [
    "The small cat sees a dog.",
    "Our friends come tomorrow.",
    "Der Zug kommt um sieben an.",
]
LONG_TEXT = " ".join(source for source, _ in SENTENCES) * 3
BAD_INPUTS = {
    "empty": "",
    "whitespace": " \t\n  ",
    "too_long": LONG_TEXT,
    "non_latin": "Москва — столица России. 北京是中国的首都。 مرحبا بالعالم",
    "emoji": "😀🚀🇩🇪 👍🏽 the cat 🐈",
}
MIXED_BATCH = list(BAD_INPUTS.values()) + NORMAL_TEXTS

# Names the "server" process must not import. TF Text's Python package imports
# tf.keras itself; its compiled op libraries are what TF Serving links.
BLOCKED_MODULES = (
    "keras", "keras_transformer", "keras_hub", "keras_nlp", "tf_keras",
    "tensorflow_text", "sentencepiece",
)

SERVER_SCRIPT = r'''
import base64, glob, importlib.abc, importlib.machinery, importlib.util, json, os, sys

BLOCKED = tuple(sys.argv[3].split(","))
attempted = []


class _Refuse(importlib.abc.Loader):
    def create_module(self, spec):
        attempted.append(spec.name)
        raise ImportError(f"{spec.name} is not installed on this server")

    def exec_module(self, module):
        raise ImportError(module.__name__)


class _Block(importlib.abc.MetaPathFinder):
    # A spec without origin: looks uninstalled to find_spec-based probes,
    # and importing it raises ImportError.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return importlib.machinery.ModuleSpec(name, _Refuse(), origin=None)
        return None


# Locate TF Text's op libraries before blocking its Python package.
tf_text_dir = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
sys.meta_path.insert(0, _Block())

import tensorflow as tf

for library in sorted(glob.glob(os.path.join(tf_text_dir, "python", "ops", "_*.so"))):
    tf.load_op_library(library)

request_path, result_path = sys.argv[1:3]
with open(request_path) as stream:
    request = json.load(stream)
texts = [base64.b64decode(t) for t in request["texts_b64"]]
ids = request["ids"]


def to_json(outputs):
    result = {}
    for key, value in outputs.items():
        value = value.numpy() if hasattr(value, "numpy") else value
        if value.dtype == object:
            result[key] = [base64.b64encode(v).decode("ascii") for v in value.tolist()]
        else:
            result[key] = value.tolist()
    return result


def serve(export_dir):
    loaded = tf.saved_model.load(export_dir)
    eager = {
        "serving_default": to_json(loaded.signatures["serving_default"](text=tf.constant(texts, tf.string))),
        "translate_ids": to_json(loaded.signatures["translate_ids"](source_ids=tf.constant(ids, tf.int32))),
    }

    # TF Serving's path: the SignatureDef's tensor names in a TF1 session.
    session_results = {}
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], export_dir)
        feeds = {"serving_default": texts, "translate_ids": ids}
        for name, value in feeds.items():
            signature = meta_graph.signature_def[name]
            (input_key,) = signature.inputs
            fetches = {key: info.name for key, info in signature.outputs.items()}
            outputs = session.run(fetches, feed_dict={signature.inputs[input_key].name: value})
            session_results[name] = {
                "input": input_key,
                "method_name": signature.method_name,
                "outputs": to_json(outputs),
            }
    return {"eager": eager, "session": session_results}


# Each export in turn, as one server loads several models.
served = {name: serve(export_dir) for name, export_dir in request["exports"].items()}
# Checked after all of them: none loaded a blocked package.
present = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
# The blocker itself works: importing any blocked package fails here.
refused = []
for name in BLOCKED:
    try:
        __import__(name)
    except ImportError:
        refused.append(name)
with open(result_path, "w") as stream:
    json.dump({"served": served, "present": present, "attempted": sorted(set(attempted)), "refused": refused},
              stream)
'''


@pytest.fixture(autouse=True)
def _seed_and_policy():
    """Overrides the suite's per-test reseeding for this module.

    `keras.utils.set_random_seed` resets TensorFlow's eager context caches, so
    every test would re-instantiate the loaded signatures (seconds each);
    the model fixture seeds once instead.
    """
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)


def b64(texts):
    return [base64.b64encode(t.encode("utf-8") if isinstance(t, str) else t).decode("ascii") for t in texts]


def decode_strict(values):
    """Every output must be valid UTF-8 (strict decoding raises otherwise)."""
    return [v.decode("utf-8", errors="strict") for v in values]


def source_ids(tokenizer, texts):
    """The export's convention: tokens cut to MAX_INPUT_LENGTH - 1, EOS, pad 0."""
    rows = [list(r)[: MAX_INPUT_LENGTH - 1] + [EOS] for r in tokenizer.tokenize(texts).to_list()]
    width = max(len(r) for r in rows)
    return np.array([r + [0] * (width - len(r)) for r in rows], dtype="int32")


def token_counts(tokenizer, texts):
    return [len(r) for r in tokenizer.tokenize(texts).to_list()]


def strip_after_eos(ids):
    ids = np.array(ids)
    after = np.cumsum(ids == EOS, axis=1) > 0
    return np.where(after, 0, ids)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    tokenizer = SubwordTokenizer.train(
        SENTENCES, 700, byte_fallback=True, hard_vocab_limit=False, seed=1
    )
    # Round trip through a file as a user would.
    path = tokenizer.save(tmp_path_factory.mktemp("tokenizer") / "spm.model")
    return SubwordTokenizer.load(path)


@pytest.fixture(scope="module")
def model(tokenizer):
    keras.utils.set_random_seed(7)
    model = kt.Transformer(
        vocabulary_size=tokenizer.vocabulary_size, d_model=32, num_heads=2, d_ff=64,
        num_encoder_layers=1, num_decoder_layers=1, dropout=0.0, output_bias=True,
    )
    model.build()
    # A nonzero bias, large enough to change outputs: an export that dropped it would part from the search.
    model.output_bias.assign(np.random.default_rng(7).normal(scale=2.0, size=tokenizer.vocabulary_size)
                             .astype("float32"))
    return model


# How often each signature's graph function ran (was traced) during the module's plain export, and the number
# of phases each search traced in it holds.
TRACES = {}
PHASES = []


@pytest.fixture(scope="module")
def export_dir(model, tokenizer, tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("translate_text", "translate_ids", "translate_ids_with_lengths", "translate_n_best", "score",
                     "_kept_hypotheses_ops"):
            patch.setattr(SignatureFunctions, name, _counting(name, getattr(SignatureFunctions, name)))
        capacities = phases._phase_capacities
        patch.setattr(phases, "_phase_capacities",
                      lambda *args: PHASES.append(len(capacities(*args))) or capacities(*args))
        return export_saved_model(
            model, tokenizer, base, beam_size=BEAM_SIZE, alpha=ALPHA, length_penalty=RULE,
            max_extra_length=MAX_EXTRA_LENGTH, max_input_length=MAX_INPUT_LENGTH,
        )


def _counting(name, function):
    def counted(*args, **kwargs):
        TRACES[name] = TRACES.get(name, 0) + 1
        return function(*args, **kwargs)

    return counted


@pytest.fixture(scope="module")
def loaded(export_dir):
    return tf.saved_model.load(export_dir)


@pytest.fixture(scope="module")
def servers(export_dir, xla_export_dir, tokenizer, tmp_path_factory):
    """{"plain": ..., "xla": ...}: both exports served by one fresh, Keras-free
    process (one start of Python and TensorFlow, 5-8 s here, instead of two)."""
    return run_server({"plain": export_dir, "xla": xla_export_dir}, tokenizer, tmp_path_factory)


@pytest.fixture(scope="module")
def server(servers):
    return servers["plain"]


@pytest.fixture(scope="module")
def xla_export_dir(model, tokenizer, tmp_path_factory):
    base = tmp_path_factory.mktemp("xla-models")
    return export_saved_model(
        model, tokenizer, base, beam_size=BEAM_SIZE, alpha=ALPHA, length_penalty=RULE,
        max_extra_length=MAX_EXTRA_LENGTH,
        max_input_length=MAX_INPUT_LENGTH, jit_compile=True,
    )


@pytest.fixture(scope="module")
def xla_server(servers):
    return servers["xla"]


def run_server(exports, tokenizer, tmp_path_factory):
    """{name: results} of the fresh, Keras-free process serving `exports` ({name: export directory}), each
    with both signatures, eager and TF1 session, and what that process imported and refused to import."""
    work = tmp_path_factory.mktemp("server")
    script = work / "server.py"
    script.write_text(SERVER_SCRIPT)
    ids = source_ids(tokenizer, NORMAL_TEXTS + MIXED_BATCH)
    request = {"texts_b64": b64(NORMAL_TEXTS + MIXED_BATCH), "ids": ids.tolist(), "exports": exports}
    (work / "request.json").write_text(json.dumps(request))
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    environment.pop("KERAS_BACKEND", None)
    completed = subprocess.run(
        [sys.executable, str(script), str(work / "request.json"), str(work / "result.json"),
         ",".join(BLOCKED_MODULES)],
        cwd=work, env=environment, capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    result = json.loads((work / "result.json").read_text())
    served = result.pop("served")
    return {name: dict(served[name], ids_sent=ids, **result) for name in exports}


def decode_b64(values):
    return [base64.b64decode(v) for v in values]


# ---------------------------------------------------------------------------
# Layout and signatures


def test_versioned_layout_and_export_info(export_dir, model, tokenizer):
    base, version = os.path.split(export_dir)
    assert version == "1" and os.path.basename(base) == "translator"
    assert os.path.isfile(os.path.join(export_dir, "saved_model.pb"))
    assert os.path.isdir(os.path.join(export_dir, "variables"))
    # Nothing but the version: the temporary directory was renamed.
    assert os.listdir(base) == ["1"]
    with open(os.path.join(export_dir, "assets.extra", "keras_transformer_export.json")) as stream:
        info = json.load(stream)
    assert info["search"] == {
        "beam_size": BEAM_SIZE, "alpha": ALPHA, "max_extra_length": MAX_EXTRA_LENGTH,
        "max_input_length": MAX_INPUT_LENGTH, "max_output_length": None, "limit_rule": "fallback",
        "length_penalty": RULE, "jit_compile": False, "xla_phase_buckets": 1, "finer_phases": False,
        "shortlist": None,
    }
    assert info["tokenizer"]["vocabulary_size"] == tokenizer.vocabulary_size
    # The SentencePiece model ships beside the graph for clients that tokenize themselves.
    with open(os.path.join(export_dir, "assets.extra", "tokenizer.model"), "rb") as stream:
        assert stream.read() == tokenizer.proto


def test_each_signature_is_traced_once(export_dir):
    """Keras' ExportArchive traces each endpoint, then tf.saved_model.save
    traces what it saves again: each search must still be traced only once
    (a trace is most of an export's time): the one beam search that
    `serving_default`, the two `translate_ids` and `translate_n_best`
    share (`_kept_hypotheses_ops`) once for the four."""
    assert TRACES == {"translate_text": 1, "translate_ids": 1, "translate_ids_with_lengths": 1, "translate_n_best": 1,
                      "score": 1, "_kept_hypotheses_ops": 1}


def test_the_search_holds_only_the_phases_the_input_limit_reaches(export_dir):
    """Sources cut to 12 ids and 6 extra positions: an 18-position buffer at
    most, decoded in phases of 16 and then the buffer; the export's one
    traced search holds those two, not the five of the whole ladder (the
    outputs, the same either way, are held to the in-process search below)."""
    assert PHASES == [2]


def test_signatures(loaded):
    assert set(loaded.signatures) == {"serving_default", "translate_ids", "translate_ids_with_lengths",
                                      "translate_n_best", "score"}
    text = loaded.signatures["serving_default"]
    _, inputs = text.structured_input_signature
    assert inputs == {"text": tf.TensorSpec([None], tf.string, name="text")}
    assert {k: (v.dtype, v.shape.as_list()) for k, v in text.structured_outputs.items()} == {
        "translations": (tf.string, [None]), "scores": (tf.float32, [None]), "truncated": (tf.bool, [None]),
    }
    ids = loaded.signatures["translate_ids"]
    _, inputs = ids.structured_input_signature
    assert inputs == {"source_ids": tf.TensorSpec([None, None], tf.int32, name="source_ids")}
    assert {k: (v.dtype, v.shape.as_list()) for k, v in ids.structured_outputs.items()} == {
        "ids": (tf.int32, [None, None]), "scores": (tf.float32, [None]), "truncated": (tf.bool, [None]),
    }


# ---------------------------------------------------------------------------
# A server without Python model code


def test_fresh_process_loads_without_keras(server):
    # None of the blocked packages was loaded by loading and calling the export ...
    assert server["present"] == []
    # ... and they could not have been: each import is refused in that process
    # (`import tensorflow` itself probes for keras and gets refused).
    assert server["refused"] == list(BLOCKED_MODULES)
    count = len(NORMAL_TEXTS + MIXED_BATCH)
    assert len(server["eager"]["serving_default"]["translations"]) == count
    assert len(server["eager"]["translate_ids"]["ids"]) == count


def test_text_signature_matches_in_process_search(server, model, tokenizer):
    texts = NORMAL_TEXTS + MIXED_BATCH
    expected = beam_search(
        model, source_ids(tokenizer, texts), beam_size=BEAM_SIZE, alpha=ALPHA, length_penalty=RULE,
        max_extra_length=MAX_EXTRA_LENGTH,
    )
    expected_texts = decode_strict(tokenizer.detokenize(expected["ids"]).numpy())
    expected_scores = keras.ops.convert_to_numpy(expected["scores"])
    exported = server["eager"]["serving_default"]
    exported_texts = decode_strict(decode_b64(exported["translations"]))
    for index, count in enumerate(token_counts(tokenizer, texts)):
        if count == 0:  # empty or whitespace only: "" and score 0, not searched
            assert (exported_texts[index], exported["scores"][index]) == ("", 0.0)
        else:
            assert exported_texts[index] == expected_texts[index], texts[index]
            np.testing.assert_allclose(exported["scores"][index], expected_scores[index], atol=1e-4)
    assert sum(c > 0 for c in token_counts(tokenizer, texts)) == len(texts) - 2


def test_text_signature_matches_translate(server, model, tokenizer):
    # The in-process API with the export's settings (it cuts long sources too).
    translator = Translator(
        model, tokenizer, beam_size=BEAM_SIZE, alpha=ALPHA, length_penalty=RULE, max_extra_length=MAX_EXTRA_LENGTH,
        max_source_length=MAX_INPUT_LENGTH,
    )
    texts = NORMAL_TEXTS + MIXED_BATCH
    expected, expected_scores = translator.translate(texts, return_scores=True)
    exported = server["eager"]["serving_default"]
    assert decode_strict(decode_b64(exported["translations"])) == expected
    np.testing.assert_allclose(exported["scores"], expected_scores, atol=1e-4)
    # Ordinary sentences (shorter than the limit) through the function API with
    # its defaults, in a smaller batch (other padding): the same translations.
    assert max(token_counts(tokenizer, NORMAL_TEXTS)) < MAX_INPUT_LENGTH
    assert translate(
        model, tokenizer, NORMAL_TEXTS, beam_size=BEAM_SIZE, alpha=ALPHA, length_penalty=RULE,
        max_extra_length=MAX_EXTRA_LENGTH,
    ) == expected[: len(NORMAL_TEXTS)]


def test_ids_signature_matches_in_process_search(server, model, tokenizer):
    expected = beam_search(
        model, server["ids_sent"], beam_size=BEAM_SIZE, alpha=ALPHA, length_penalty=RULE,
        max_extra_length=MAX_EXTRA_LENGTH,
    )
    exported = server["eager"]["translate_ids"]
    expected_ids = strip_after_eos(keras.ops.convert_to_numpy(expected["ids"]))
    expected_scores = keras.ops.convert_to_numpy(expected["scores"])
    has_tokens = np.array(token_counts(tokenizer, NORMAL_TEXTS + MIXED_BATCH)) > 0
    expected_ids[~has_tokens] = 0
    expected_scores[~has_tokens] = 0.0
    exported_ids = np.array(exported["ids"])
    assert exported_ids.shape == expected_ids.shape
    np.testing.assert_array_equal(exported_ids, expected_ids)
    np.testing.assert_allclose(exported["scores"], expected_scores, atol=1e-4)
    # The two signatures agree on the same sentences.
    text_scores = server["eager"]["serving_default"]["scores"]
    np.testing.assert_allclose(exported["scores"], text_scores, atol=1e-4)


def test_n_best_signature_matches_in_process_n_best(loaded, model, tokenizer):
    texts = NORMAL_TEXTS[:3] + ["", "   "]
    exported = loaded.signatures["translate_n_best"](text=tf.constant(texts))
    translations = [[t.decode("utf-8") for t in row] for row in exported["translations"].numpy()]
    scores, counts = exported["scores"].numpy(), exported["counts"].numpy()
    translator = Translator(model, tokenizer, beam_size=BEAM_SIZE, alpha=ALPHA, length_penalty=RULE,
                            max_extra_length=MAX_EXTRA_LENGTH, max_source_length=MAX_INPUT_LENGTH)
    expected = translator.translate(texts, n_best=BEAM_SIZE)
    for row, hypotheses in enumerate(expected):
        if row >= 3:  # no tokens: nothing found, "" and 0 everywhere
            assert counts[row] == 0 and translations[row] == [""] * BEAM_SIZE and not scores[row].any()
            continue
        assert counts[row] == len(hypotheses)
        assert translations[row][: counts[row]] == [h.translation for h in hypotheses]
        np.testing.assert_allclose(scores[row][: counts[row]], [h.score for h in hypotheses], atol=1e-4)
        assert list(scores[row][: counts[row]]) == sorted(scores[row][: counts[row]], reverse=True)
        # The first is what serving_default returns.
    best = loaded.signatures["serving_default"](text=tf.constant(texts))["translations"].numpy()
    assert [t.decode("utf-8") for t in best] == [row[0] for row in translations]


def test_score_signature_matches_in_process_scores(loaded, model, tokenizer):
    sources = [NORMAL_TEXTS[0], NORMAL_TEXTS[1], "", "ein langer Satz " * 40]
    targets = ["Die kleine Katze.", "", "Hallo.", "Ein Satz."]
    exported = loaded.signatures["score"](source=tf.constant(sources), target=tf.constant(targets))
    translator = Translator(model, tokenizer, alpha=ALPHA, length_penalty=RULE, max_source_length=MAX_INPUT_LENGTH)
    with pytest.warns(UserWarning, match="truncated"):
        expected = translator.score(sources, targets)
    np.testing.assert_allclose(exported["log_probs"].numpy(), [e["log_prob"] for e in expected], atol=1e-4)
    np.testing.assert_allclose(exported["scores"].numpy(), [e["score"] for e in expected], atol=1e-4)
    assert exported["tokens"].numpy().tolist() == [e["tokens"] for e in expected]
    # The rule baked in, by hand: log P over the tokens (EOS counted) to the power alpha.
    np.testing.assert_allclose(exported["scores"].numpy(),
                               exported["log_probs"].numpy() / exported["tokens"].numpy() ** ALPHA, rtol=1e-5)
    assert exported["truncated"].numpy().tolist() == [False, False, False, True]
    # Bad input never fails a request (a target over the limit does, below).
    bad = [b"\xff\xfe", b"", "日本語".encode(), b"x" * 5000]
    result = loaded.signatures["score"](source=tf.constant(bad), target=tf.constant(bad[:3][::-1] + [b"x"]))
    assert np.all(np.isfinite(result["log_probs"].numpy()))
    n_best = loaded.signatures["translate_n_best"](text=tf.constant(bad))
    for row in n_best["translations"].numpy():
        decode_strict(row)


def test_xla_variant_runs_without_keras_and_translates_as_the_plain_one(xla_server, server, xla_export_dir):
    """The XLA variant (search compiled with XLA, requests padded to fixed
    multiples) loads in the same Keras-free process, and both of its
    signatures give what the plain export gives, eager and in a TF1 session."""
    assert xla_server["present"] == []
    for mode in ("eager", "session"):
        def outputs(result, signature):
            found = result[mode][signature]
            return found["outputs"] if mode == "session" else found

        plain, xla = outputs(server, "serving_default"), outputs(xla_server, "serving_default")
        assert decode_b64(xla["translations"]) == decode_b64(plain["translations"])
        np.testing.assert_allclose(xla["scores"], plain["scores"], atol=1e-4)
        plain_ids, xla_ids = outputs(server, "translate_ids"), outputs(xla_server, "translate_ids")
        np.testing.assert_allclose(xla_ids["scores"], plain_ids["scores"], atol=1e-4)
        width = np.shape(plain_ids["ids"])[1]
        # Wider (the source was padded), but pad beyond the plain width.
        assert np.array_equal(np.asarray(xla_ids["ids"])[:, :width], plain_ids["ids"])
        assert not np.asarray(xla_ids["ids"])[:, width:].any()
    with pytest.raises(ServingOpsError, match="XLA"):
        check_serving_ops(xla_export_dir)  # not for a stock TF Serving
    assert check_serving_ops(xla_export_dir, allow_xla=True)


def test_int8_export_keeps_the_output_bias(model, tokenizer, tmp_path):
    """The int8 SavedModel of the module's model (random output bias, kept
    float; the export checks its int8 weights and products) gives the ids of
    the same int8 copy searched in process, which the bias changes. Greedy:
    one search to trace. (The bfloat16 export, checked the same way once,
    agreed too; its bias is a bfloat16 variable, as its check requires.)"""
    from keras_transformer.export.quantize import quantize_model

    copy = quantize_model(model, "int8")
    assert copy.output_bias.dtype == "float32"
    assert quantize_model(model, "bfloat16").output_bias.dtype == "bfloat16"
    export_dir = export_saved_model(model, tokenizer, tmp_path, beam_size=1, alpha=ALPHA, quantize="int8",
                                    max_extra_length=MAX_EXTRA_LENGTH, max_input_length=MAX_INPUT_LENGTH,
                                    warmup_rows=1)
    ids = source_ids(tokenizer, NORMAL_TEXTS)
    exported = tf.saved_model.load(export_dir).signatures["translate_ids"](source_ids=tf.constant(ids, tf.int32))
    expected = greedy_search(copy, ids, max_extra_length=MAX_EXTRA_LENGTH, compile=False)
    expected_ids = strip_after_eos(keras.ops.convert_to_numpy(expected["ids"]))
    np.testing.assert_array_equal(exported["ids"].numpy(), expected_ids)
    copy.output_bias.assign(np.zeros(tokenizer.vocabulary_size, "float32"))
    unbiased = greedy_search(copy, ids, max_extra_length=MAX_EXTRA_LENGTH, compile=False)
    assert not np.array_equal(strip_after_eos(keras.ops.convert_to_numpy(unbiased["ids"])), expected_ids)


def test_graph_mode_signature_defs_match_eager(server):
    session = server["session"]
    assert session["serving_default"]["input"] == "text"
    assert session["translate_ids"]["input"] == "source_ids"
    for name in ("serving_default", "translate_ids"):
        assert session[name]["method_name"] == "tensorflow/serving/predict"
    graph_text = session["serving_default"]["outputs"]
    eager_text = server["eager"]["serving_default"]
    assert graph_text["translations"] == eager_text["translations"]
    np.testing.assert_allclose(graph_text["scores"], eager_text["scores"], atol=1e-5)
    graph_ids = session["translate_ids"]["outputs"]
    assert graph_ids["ids"] == server["eager"]["translate_ids"]["ids"]


# ---------------------------------------------------------------------------
# Ops


def test_op_check_accepts_the_export(export_dir):
    ops = check_serving_ops(export_dir)
    assert ops == list_ops(export_dir)
    # Tokenizer, search loop and detokenizer are in the graph.
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"} <= set(ops)
    assert {"While", "TopKV2", "MatMul"} <= set(ops)
    assert not [op for op in ops if op.startswith(("Py", "EagerPy", "Xla"))]
    assert set(ops) & TF_TEXT_OPS == {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"}


def _save_module(path, function, signature):
    module = tf.Module()
    module.f = tf.function(function, input_signature=signature)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.f})
    return str(path)


def test_op_check_rejects_python_xla_and_unknown_ops(tmp_path):
    spec = [tf.TensorSpec([None, 4], tf.float32)]
    python = _save_module(
        tmp_path / "python", lambda x: {"y": tf.py_function(lambda v: v * 2, [x], tf.float32)}, spec
    )
    with pytest.raises(ServingOpsError, match="EagerPyFunc") as error:
        check_serving_ops(python)
    assert error.value.export_dir == python and set(error.value.offending) == {"EagerPyFunc"}

    # keras.ops.slice_update lowers to XlaDynamicUpdateSlice on TensorFlow.
    xla = _save_module(
        tmp_path / "xla",
        lambda x: {"y": keras.ops.slice_update(x, [0, 1], tf.ones([1, 2]))},
        spec,
    )
    with pytest.raises(ServingOpsError, match="XlaDynamicUpdateSlice.*XLA"):
        check_serving_ops(xla)

    inner = tf.function(lambda x: x * 2.0, jit_compile=True)
    jit = _save_module(tmp_path / "jit", lambda x: {"y": inner(x)}, spec)
    with pytest.raises(ServingOpsError, match="jit_compile"):
        check_serving_ops(jit)

    # A TF Text op outside the allow-list counts as unknown.
    plain = _save_module(
        tmp_path / "plain", lambda x: {"y": tf.strings.as_string(x)}, spec
    )
    assert "AsString" in check_serving_ops(plain)
    with pytest.raises(ServingOpsError, match="AsString"):
        # Pretend AsString were not core: the check must name it.
        import keras_transformer.export.opcheck as opcheck

        original = opcheck.core_tensorflow_ops
        try:
            opcheck.core_tensorflow_ops = lambda: frozenset(original()) - {"AsString"}
            check_serving_ops(plain)
        finally:
            opcheck.core_tensorflow_ops = original


def test_op_check_needs_a_serving_saved_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a SavedModel"):
        check_serving_ops(tmp_path)


# ---------------------------------------------------------------------------
# Bad input at serving time


def _bounded(translation, tokenizer):
    """At most max_input_length + max_extra_length pieces, each at most the longest piece."""
    longest_piece = max(len(p) for p in tokenizer.vocabulary())
    return len(translation) <= (MAX_INPUT_LENGTH + MAX_EXTRA_LENGTH) * longest_piece


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input(case, loaded, tokenizer):
    text = BAD_INPUTS[case]
    outputs = loaded.signatures["serving_default"](text=tf.constant([text]))
    (translation,) = decode_strict(outputs["translations"].numpy())
    assert _bounded(translation, tokenizer)
    assert np.isfinite(outputs["scores"].numpy()).all()
    # The same sentence through the ids signature: output length bounded in tokens.
    ids = loaded.signatures["translate_ids"](source_ids=tf.constant(source_ids(tokenizer, [text])))
    assert np.count_nonzero(ids["ids"].numpy()) <= MAX_INPUT_LENGTH + MAX_EXTRA_LENGTH
    np.testing.assert_allclose(ids["scores"].numpy(), outputs["scores"].numpy(), atol=1e-4)
    if case in ("empty", "whitespace"):
        assert translation == "" and outputs["scores"].numpy()[0] == 0.0
    else:
        assert outputs["scores"].numpy()[0] < 0.0


def test_score_refuses_a_target_over_the_limit(loaded, model, tokenizer):
    """A target longer than max_input_length + max_extra_length tokens (the
    longest translation the export makes) is refused, never scored cut: an
    InvalidArgument from the signature, a ValueError in process, both
    naming the limit. At the limit, both score it alike."""
    words = "Die kleine Katze sieht einen Hund und das Haus ist alt und neu heute".split() * 3
    lengths = {n: len(tokenizer.tokenize([" ".join(words[:n])]).to_list()[0]) for n in range(1, len(words) + 1)}
    limit = MAX_INPUT_LENGTH + MAX_EXTRA_LENGTH
    fits = " ".join(words[: max(n for n, length in lengths.items() if length <= limit)])
    over = " ".join(words[: min(n for n, length in lengths.items() if length > limit)])
    translator = Translator(model, tokenizer, alpha=ALPHA, length_penalty=RULE, max_source_length=MAX_INPUT_LENGTH,
                            max_extra_length=MAX_EXTRA_LENGTH)
    score = loaded.signatures["score"]
    exported = score(source=tf.constant(["A cat.", "A dog."]), target=tf.constant([fits, "Ein Hund."]))
    expected = translator.score(["A cat.", "A dog."], [fits, "Ein Hund."])
    np.testing.assert_allclose(exported["log_probs"].numpy(), [e["log_prob"] for e in expected], atol=1e-4)
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"score: a target holds more than {limit} tokens "
                       rf"\(the longest translation these settings make: max_source_length {MAX_INPUT_LENGTH} "
                       rf"\+ max_extra_length {MAX_EXTRA_LENGTH}\)"):
        score(source=tf.constant(["A cat.", "A dog."]), target=tf.constant(["Ein Hund.", over]))
    with pytest.raises(ValueError, match=rf"score: targets\[1\] has {limit + 1}.* tokens, more than the limit of "
                       rf"{limit} tokens"):
        translator.score(["A cat.", "A dog."], ["Ein Hund.", over])


def test_long_input_is_truncated(loaded, tokenizer):
    tokens = tokenizer.tokenize([LONG_TEXT]).to_list()[0]
    assert len(tokens) > 5 * MAX_INPUT_LENGTH
    prefix = tokens[: MAX_INPUT_LENGTH - 1]
    whole = loaded.signatures["translate_ids"](source_ids=tf.constant([tokens]))
    cut = loaded.signatures["translate_ids"](source_ids=tf.constant([prefix]))
    np.testing.assert_array_equal(whole["ids"].numpy(), cut["ids"].numpy())
    # The buffer (input + EOS + extra) is bounded, whatever the request's length.
    assert whole["ids"].shape[1] <= MAX_INPUT_LENGTH + MAX_EXTRA_LENGTH
    text = loaded.signatures["serving_default"](text=tf.constant([LONG_TEXT]))
    np.testing.assert_allclose(text["scores"].numpy(), cut["scores"].numpy(), atol=1e-4)


def test_mixed_batch_matches_sentences_alone(loaded, tokenizer):
    serve = loaded.signatures["serving_default"]
    batch = serve(text=tf.constant(MIXED_BATCH))
    translations = decode_strict(batch["translations"].numpy())
    assert len(translations) == len(MIXED_BATCH)
    for index, text in enumerate(MIXED_BATCH):
        alone = serve(text=tf.constant([text]))
        assert translations[index] == decode_strict(alone["translations"].numpy())[0], text
        np.testing.assert_allclose(batch["scores"][index], alone["scores"][0], atol=1e-4)
        assert _bounded(translations[index], tokenizer)


def test_invalid_utf8_and_empty_batch(loaded):
    serve = loaded.signatures["serving_default"]
    outputs = serve(text=tf.constant([b"\xff\xfe\xc3", b"ok \xe2\x82", b"\x00"]))
    assert len(decode_strict(outputs["translations"].numpy())) == 3
    empty = serve(text=tf.zeros([0], tf.string))
    assert empty["translations"].shape == (0,) and empty["scores"].shape == (0,)


def test_ids_signature_tolerates_bad_ids(loaded):
    ids = loaded.signatures["translate_ids"]
    # Out-of-range ids act as unk (1); BOS is dropped; a row ends at its first pad or EOS, whatever follows.
    odd = ids(source_ids=tf.constant([[10, 99999, -5, 3, 7], [2, 10, 1, 0, 5]]))
    clean = ids(source_ids=tf.constant([[10, 1, 1], [10, 1, 0]]))
    np.testing.assert_array_equal(odd["ids"].numpy(), clean["ids"].numpy())
    np.testing.assert_allclose(odd["scores"].numpy(), clean["scores"].numpy(), atol=1e-4)
    # Nothing but padding: translated as an empty sentence.
    empty = ids(source_ids=tf.constant([[0, 0], [3, 2]]))
    assert not empty["ids"].numpy().any() and not empty["scores"].numpy().any()
    assert empty["ids"].shape[0] == 2


def server_batch(requests, extra=3):
    """The requests as TF Serving's batching with `pad_variable_length_inputs` merges them: each
    widened to the widest plus `extra` with its own first element, not 0 (batching_util.cc at 2.20.0:
    `T pad_value(input.flat<T>()(0))`; tensorflow/serving issue 1279), rows concatenated."""
    width = max(request.shape[1] for request in requests) + extra
    return np.concatenate([np.pad(request, [(0, 0), (0, width - request.shape[1])],
                                  constant_values=request[0, 0]) for request in requests]).astype("int32")


def test_ids_padded_by_the_server_translate_as_sent(loaded, tokenizer):
    """Rows that end with EOS read the same after the server's padding; rows without one need their lengths
    (`translate_ids_with_lengths`), and `translate_ids` reads the padding as tokens there."""
    texts = NORMAL_TEXTS[:3]
    # The signature on the rows as sent (equal to the in-process search:
    # test_ids_signature_matches_in_process_search; an eager search here would take most of this test's time).
    expected = loaded.signatures["translate_ids"](source_ids=tf.constant(source_ids(tokenizer, texts)))
    expected_ids, expected_scores = expected["ids"].numpy(), expected["scores"].numpy()
    assert expected_ids.any()

    def check(outputs):
        ids = outputs["ids"].numpy()
        np.testing.assert_array_equal(ids[:, : expected_ids.shape[1]], expected_ids)
        assert not ids[:, expected_ids.shape[1]:].any()
        np.testing.assert_allclose(outputs["scores"].numpy(), expected_scores, atol=1e-4)

    # Two requests: two sentences (pad 0 after the shorter's EOS), one sentence (no pad at all).
    ended = server_batch([source_ids(tokenizer, texts[:2]), source_ids(tokenizer, texts[2:])])
    assert (ended[:, -1] > EOS).all()  # the padding is made of tokens, not pad
    check(loaded.signatures["translate_ids"](source_ids=tf.constant(ended)))

    tokens = [list(row) for row in tokenizer.tokenize(texts).to_list()]
    assert max(map(len, tokens)) < MAX_INPUT_LENGTH

    def dense(rows):
        return np.array([row + [0] * (max(map(len, rows)) - len(row)) for row in rows], "int32")

    bare = server_batch([dense(tokens[:2]), dense(tokens[2:])])  # no EOS anywhere
    lengths = np.array([len(row) for row in tokens], "int32")
    check(loaded.signatures["translate_ids_with_lengths"](source_ids=tf.constant(bare),
                                                          source_lengths=tf.constant(lengths)))
    # Without lengths, the lone sentence's padding is indistinguishable from its tokens (why lengths exist).
    misread = loaded.signatures["translate_ids"](source_ids=tf.constant(bare[2:]))
    as_tokens = loaded.signatures["translate_ids"](source_ids=tf.constant([list(bare[2]) + [EOS]]))
    np.testing.assert_array_equal(misread["ids"].numpy(), as_tokens["ids"].numpy())


def test_ids_with_lengths_refuses_bad_lengths(loaded):
    signature = loaded.signatures["translate_ids_with_lengths"]
    ids = tf.constant([[10, 11, 12], [13, 0, 0]])
    for lengths, message in (([1], "one length per row of `source_ids`"),
                             ([1, 4], "a length in `source_lengths` exceeds the width of `source_ids`"),
                             ([-1, 1], "`source_lengths` holds a negative length")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            signature(source_ids=ids, source_lengths=tf.constant(lengths))
    # A length of 0: an empty source, "" with score 0, as an empty row.
    empty = signature(source_ids=ids, source_lengths=tf.constant([0, 1]))
    assert not empty["ids"].numpy()[0].any() and empty["scores"].numpy()[0] == 0.0


# ---------------------------------------------------------------------------
# Versions, atomic writes, errors


def test_next_version(tmp_path):
    assert next_version(tmp_path / "missing") == 1
    for name in ("1", "7", "x", ".tmp-export-123"):
        (tmp_path / name).mkdir()
    (tmp_path / "12").write_text("a file, not a version")
    assert next_version(tmp_path) == 8


def _tree_digest(path):
    digest = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            digest.update(os.path.relpath(full, path).encode())
            with open(full, "rb") as stream:
                digest.update(stream.read())
    return digest.hexdigest()


def _full_disk_in_write_out(filepath):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _full_disk_in_tensorflow_writer(filepath):
    # What TensorFlow's SaveV2 raises when the disk fills up (checked on a
    # 1 MiB tmpfs): an OpError naming its temporary file, no errno.
    raise tf.errors.ResourceExhaustedError(
        None, None,
        f"{filepath}/variables/variables_temp/part-00000-of-00001.data-00000-of-00001"
        ".tempstate123; No space left on device [Op:SaveV2]",
    )


@pytest.mark.parametrize("failure", ["python_write", "tensorflow_writer", "export_info"])
def test_full_disk_leaves_earlier_version_intact(failure, export_dir, model, tokenizer, tmp_path, monkeypatch):
    base = tmp_path / "models"
    shutil.copytree(os.path.dirname(export_dir), base / "translator")
    before = _tree_digest(base)
    written = []

    class FailingArchive:
        """Writes part of a SavedModel, then fails like a full disk."""

        def track(self, resource):
            pass

        def add_endpoint(self, name, fn, input_signature=None):
            pass

        def write_out(self, filepath, **kwargs):
            written.append(filepath)
            os.makedirs(os.path.join(filepath, "variables"))
            with open(os.path.join(filepath, "saved_model.pb"), "wb") as stream:
                stream.write(b"partial")
            if failure == "python_write":
                _full_disk_in_write_out(filepath)
            if failure == "tensorflow_writer":
                _full_disk_in_tensorflow_writer(filepath)

    def full_disk_dump(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(keras.export, "ExportArchive", FailingArchive)
    if failure == "export_info":
        monkeypatch.setattr(json, "dump", full_disk_dump)
    with pytest.raises(ExportDirectoryError) as raised:
        export_saved_model(model, tokenizer, base, max_input_length=MAX_INPUT_LENGTH)
    # A clear error: what failed, where, and that nothing was published.
    assert raised.value.errno == errno.ENOSPC
    message = str(raised.value)
    assert "No space left on device" in message
    assert f"version 2 into the export directory {str(base / 'translator')!r}" in message
    assert "earlier versions are untouched" in message
    # It wrote beside the versions, not into a version directory ...
    assert len(written) == 1 and os.path.dirname(written[0]) == str(base / "translator")
    assert not os.path.basename(written[0]).isdigit()
    # ... and left nothing behind: no version 2, no temporary directory.
    assert sorted(os.listdir(base / "translator")) == ["1"]
    assert _tree_digest(base) == before


def test_errors_other_than_the_file_system_pass_through(export_dir, model, tokenizer, tmp_path, monkeypatch):
    class BrokenArchive:
        def track(self, resource):
            pass

        def add_endpoint(self, name, fn, input_signature=None):
            pass

        def write_out(self, filepath, **kwargs):
            raise tf.errors.InvalidArgumentError(None, None, "a tracing bug")

    monkeypatch.setattr(keras.export, "ExportArchive", BrokenArchive)
    with pytest.raises(tf.errors.InvalidArgumentError, match="a tracing bug"):
        export_saved_model(model, tokenizer, tmp_path, max_input_length=MAX_INPUT_LENGTH)
    assert os.listdir(tmp_path / "translator") == []


def test_existing_version_is_never_overwritten(export_dir, model, tokenizer):
    base = os.path.dirname(os.path.dirname(export_dir))
    with pytest.raises(FileExistsError, match=r"translator/1 already exists"):
        export_saved_model(model, tokenizer, base, version=1)


def test_unwritable_directory_names_the_path(model, tokenizer, tmp_path):
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    with pytest.raises(ExportDirectoryError, match="not_a_directory"):
        export_saved_model(model, tokenizer, blocker / "models")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "a/b"}, "`name`"),
        ({"name": ".hidden"}, "`name`"),
        ({"version": -1}, "`version`"),
        ({"beam_size": 0}, "`beam_size`"),
        ({"max_input_length": 1}, "`max_input_length`"),
        ({"alpha": -0.5}, "`alpha`"),
    ],
)
def test_bad_arguments(kwargs, message, model, tokenizer, tmp_path):
    with pytest.raises(ValueError, match=message):
        export_saved_model(model, tokenizer, tmp_path, **kwargs)
    assert not os.listdir(tmp_path)


def test_tokenizer_must_fit_the_model(tokenizer, tmp_path):
    small = kt.Transformer(
        vocabulary_size=tokenizer.vocabulary_size - 10, d_model=8, num_heads=2, d_ff=8,
        num_encoder_layers=1, num_decoder_layers=1,
    )
    small.build()
    with pytest.raises(ValueError, match="not trained together"):
        export_saved_model(small, tokenizer, tmp_path)


def test_input_limit_must_fit_learned_positions(tokenizer, tmp_path):
    learned = kt.Transformer(
        vocabulary_size=tokenizer.vocabulary_size, d_model=8, num_heads=2, d_ff=8,
        num_encoder_layers=1, num_decoder_layers=1, positional_encoding="learned", max_length=10,
    )
    learned.build()
    with pytest.raises(ValueError, match="learned positions"):
        export_saved_model(learned, tokenizer, tmp_path, max_input_length=16)


def test_default_source_limit_is_the_same_in_process_and_served(model, tokenizer, tmp_path):
    """One default source limit (`inputs.DEFAULT_MAX_SOURCE_LENGTH`, 256 ids with EOS) for `Translator`,
    `export_saved_model` and `export_ctranslate2`: a text of 2,000 pieces gives one translation in process
    and through a SavedModel exported with the defaults, both cut to its first 255 pieces."""
    from keras_transformer.decoding.inputs import DEFAULT_MAX_SOURCE_LENGTH

    text = " ".join(["zebra"] * 500)
    pieces = len(tokenizer.tokenize([text]).to_list()[0])
    assert pieces >= 2000 and DEFAULT_MAX_SOURCE_LENGTH == 256
    # Greedy, few extra tokens: the quickest export and search that still decode 255 source positions.
    export_dir = export_saved_model(model, tokenizer, tmp_path / "models", beam_size=1, max_extra_length=2,
                                    check_ops=False, warmup_rows=1)
    info = json.loads(open(os.path.join(export_dir, "assets.extra", "keras_transformer_export.json")).read())
    assert info["search"]["max_input_length"] == DEFAULT_MAX_SOURCE_LENGTH
    served = tf.saved_model.load(export_dir).signatures["serving_default"](text=tf.constant([text]))
    assert served["truncated"].numpy().tolist() == [True]
    translator = Translator(model, tokenizer, beam_size=1, max_extra_length=2)
    with pytest.warns(UserWarning, match=r"max_source_length=256 tokens .* truncated"):
        in_process = translator.translate([text])
    assert translator.last_truncated == [0]
    assert decode_strict(served["translations"].numpy()) == in_process


def test_ctranslate2_export_has_the_same_default_source_limit(model, tokenizer, tmp_path):
    """`export_ctranslate2` records the default limit, which its wrapper applies."""
    from required_imports import required

    required("ctranslate2")  # under CI=true a missing package fails the test instead of skipping it
    from keras_transformer.decoding.inputs import DEFAULT_MAX_SOURCE_LENGTH
    from keras_transformer.export.ctranslate2 import CTRANSLATE2_OPTIONS_PATH, export_ctranslate2

    directory = export_ctranslate2(model, tokenizer, tmp_path / "ct2", beam_size=1, max_extra_length=2)
    info = json.loads(open(os.path.join(directory, CTRANSLATE2_OPTIONS_PATH)).read())
    assert info["search"]["max_input_length"] == DEFAULT_MAX_SOURCE_LENGTH
