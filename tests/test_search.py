"""Greedy and beam search (backend-agnostic: run under tensorflow, jax and torch).

References are independent of the search code: full forward passes of the
model (`model.predict_on_batch({"source", "target"})`) driven by numpy loops.
The comparisons with the standard beam search written in numpy, with an
exhaustive enumeration and with constrained greedy references are in
test_search_references.py (a separate module, so that the two halves run
on separate test workers).
"""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from conftest import to_numpy
from keras_transformer.decoding import beam_search, greedy_search, length_penalty
from keras_transformer.decoding import candidates as candidates_module
from keras_transformer.decoding import phases as phases_module

PAD, BOS, EOS = 0, 2, 3
EXTRA = 4  # max_extra_length used throughout, so compiled searches are reused


def make_model(vocabulary_size=12, eos_scale=2.0, seed=3, **overrides):
    """A small model with weights drawn by numpy, hence identical under every backend.

    The EOS embedding row is scaled up so that the EOS logit swings widely:
    with seed 3, some hypotheses end early with EOS and others run to their
    length limit (the tests check that the fixture mixes both).
    """
    config = dict(d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1, num_decoder_layers=2, dropout=0.1)
    config.update(overrides)
    model = kt.Transformer(vocabulary_size=vocabulary_size, **config)
    model.build()
    draw_weights(model, seed, eos_scale)
    return model


def draw_weights(model, seed, eos_scale):
    """New random weights for `model` in place (same shapes: no recompilation)."""
    rng = np.random.default_rng(seed)
    weights = []
    for variable in model.weights:
        shape = tuple(variable.shape)
        if "gamma" in variable.path:
            value = 1.0 + 0.1 * rng.normal(size=shape)
        elif len(shape) == 1:
            value = 0.1 * rng.normal(size=shape)
        else:
            fan_in = shape[-1] if "embeddings" in variable.path else shape[0]
            value = rng.normal(size=shape) / np.sqrt(fan_in)
        weights.append(value.astype("float32"))
    model.set_weights(weights)
    embeddings = to_numpy(model.target_embedding.embeddings).copy()
    embeddings[EOS] *= eos_scale
    model.target_embedding.embeddings.assign(embeddings)


def make_sources(vocabulary_size=12, lengths=(6, 1, 3, 5), seed=0):
    """Sources ending with EOS and padded to the longest (the data pipeline's format)."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), max(lengths)), "int32")
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = rng.integers(4, vocabulary_size, size=length - 1)
        ids[row, length - 1] = EOS
    return ids


@pytest.fixture(scope="module")
def model():
    return make_model()


@pytest.fixture(scope="module")
def source():
    return make_sources()


def limits_of(source, extra=EXTRA):
    return (source != PAD).sum(1) + extra


def numpy_log_softmax(logits):
    logits = logits - logits.max(-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def full_log_probs(model, source_row, targets):
    """log P of each next token for decoder inputs `targets` (n, t), by full forward passes."""
    source = np.repeat(source_row[None], len(targets), axis=0)
    # predict_on_batch compiles the forward pass (eager JAX compiles op by op, slowly).
    logits = to_numpy(model.predict_on_batch({"source": source, "target": np.asarray(targets, "int32")}))
    return numpy_log_softmax(logits.astype("float64"))


def gnmt_penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def as_numpy(result):
    return {key: to_numpy(value) for key, value in result.items()}


@pytest.mark.usefixtures("one_phase_search")  # buffers of at most 16 positions (conftest)
def test_greedy_matches_step_by_step_full_forward_passes(model, source):
    result = as_numpy(greedy_search(model, source, max_extra_length=EXTRA))
    assert result["ids"].shape == (4, source.shape[1] + EXTRA)
    limits = limits_of(source)
    # The reference re-runs the whole model on BOS + the tokens so far, for
    # all sentences at once; a finished sentence keeps its tokens.
    tokens = [[] for _ in source]
    scores = np.zeros(len(source))
    width = int(limits.max())  # one shape for every pass (JAX compiles per shape)
    while any(len(t) < limit and EOS not in t for t, limit in zip(tokens, limits)):
        targets = [[BOS] + t + [PAD] * (width - 1 - len(t)) for t in tokens]
        logits = to_numpy(model.predict_on_batch({"source": source, "target": np.array(targets, "int32")}))
        for row, row_tokens in enumerate(tokens):
            if len(row_tokens) == limits[row] or EOS in row_tokens:
                continue
            log_probs = numpy_log_softmax(logits[row, len(row_tokens)].astype("float64"))
            log_probs[[PAD, BOS]] = -np.inf
            token = int(np.argmax(log_probs))
            row_tokens.append(token)
            scores[row] += log_probs[token]
    for row, row_tokens in enumerate(tokens):
        expected = np.zeros(result["ids"].shape[1], "int32")
        expected[: len(row_tokens)] = row_tokens
        np.testing.assert_array_equal(result["ids"][row], expected)
        assert result["lengths"][row] == len(row_tokens)
    np.testing.assert_allclose(result["scores"], scores, rtol=1e-5, atol=1e-4)
    # The fixture exercises both endings: EOS before the limit, and the limit.
    ended = [EOS in row for row in result["ids"]]
    assert any(ended) and not all(ended)


@pytest.mark.usefixtures("one_phase_search")  # buffers of at most 16 positions (conftest)
@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_cached_search_equals_search_rerunning_the_full_decoder(search, jit_compile, model, source):
    # On TensorFlow, XLA's cache layout (keys stored transposed, written with
    # slice_update) differs from the plain graph's; other backends have one path.
    if jit_compile and keras.backend.backend() != "tensorflow":
        pytest.skip("jit_compile selects a different cache layout on TensorFlow only")
    options = dict(max_extra_length=EXTRA, jit_compile=jit_compile)
    if search == "greedy":
        run = lambda use_cache: as_numpy(greedy_search(model, source, use_cache=use_cache, **options))
    else:
        run = lambda use_cache: as_numpy(
            beam_search(model, source, use_cache=use_cache, return_all_beams=True, **options)
        )
    cached, uncached = run(True), run(False)
    np.testing.assert_array_equal(cached["ids"], uncached["ids"])
    np.testing.assert_array_equal(cached["lengths"], uncached["lengths"])
    np.testing.assert_allclose(cached["scores"], uncached["scores"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cached["log_probs"], uncached["log_probs"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_outputs_crossing_several_phases_equal_the_uncached_search(search, jit_compile, model, source):
    """min_length 36 makes every output at least 36 tokens long: the cached
    search decodes it in three phases (room for 16, then 32, then the
    42-position buffer), growing its caches twice mid-hypothesis. The
    uncached search re-runs the decoder on every prefix, with no cache to
    grow. Entries lost, moved or misplaced by a growth change the outputs."""
    if jit_compile and keras.backend.backend() != "tensorflow":
        pytest.skip("jit_compile selects a different cache layout on TensorFlow only")
    assert phases_module.PHASE_CAPACITIES[:2] == (16, 32)
    options = dict(max_extra_length=36, min_length=36, jit_compile=jit_compile)
    if search == "greedy":
        run = lambda use_cache: as_numpy(greedy_search(model, source, use_cache=use_cache, **options))
    else:
        run = lambda use_cache: as_numpy(
            beam_search(model, source, beam_size=3, use_cache=use_cache, return_all_beams=True, **options)
        )
    cached, uncached = run(True), run(False)
    filled = np.isfinite(cached["scores"])  # under the default rule some beams' slots stay empty
    assert np.all(cached["lengths"][filled] >= 36)
    np.testing.assert_array_equal(cached["ids"], uncached["ids"])
    np.testing.assert_array_equal(cached["lengths"], uncached["lengths"])
    np.testing.assert_allclose(cached["scores"], uncached["scores"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cached["log_probs"], uncached["log_probs"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("search", ["beam", "beam with constraints", "greedy with constraints", "sampling"])
def test_phases_change_no_output(search, monkeypatch):
    """Every option through phases of 1, 2 and 4 positions (then the
    buffer's 9-10) gives what one phase over the whole buffer gives."""
    from keras_transformer.decoding import sampling_search

    model = make_model(vocabulary_size=9, num_encoder_layers=1, num_decoder_layers=1, eos_scale=0.5, seed=6)
    source = make_sources(vocabulary_size=9, lengths=(3, 5, 2, 4), seed=2)
    prefixes = np.array([[5, 6, 0], [0, 0, 0], [7, 0, 0], [4, 4, 8]], "int32")
    constraints = dict(prefix_ids=prefixes, no_repeat_ngram_size=2, min_length=2)
    runs = {
        # "finish": hypotheses cut at the limit fill the beams, long enough for the last phase.
        "beam": lambda: beam_search(model, source, beam_size=3, max_extra_length=5, return_all_beams=True,
                                    limit_rule="finish"),
        "beam with constraints": lambda: beam_search(model, source, beam_size=2, max_extra_length=5,
                                                     **constraints),
        "greedy with constraints": lambda: greedy_search(model, source, max_extra_length=5, **constraints),
        "sampling": lambda: sampling_search(model, source, seed=1, top_p=0.9, max_extra_length=5),
    }
    monkeypatch.setattr(phases_module, "PHASE_CAPACITIES", ())
    whole = as_numpy(runs[search]())
    monkeypatch.setattr(phases_module, "PHASE_CAPACITIES", (1, 2, 4))
    phased = as_numpy(runs[search]())
    assert np.max(phased["lengths"]) > 4  # the last phase decoded
    np.testing.assert_array_equal(phased["ids"], whole["ids"])
    np.testing.assert_array_equal(phased["lengths"], whole["lengths"])
    np.testing.assert_allclose(phased["scores"], whole["scores"], rtol=1e-6, atol=1e-6)
    # Under finer_phases, a search that drops done sentences (TensorFlow's plain graph, PyTorch) decodes in
    # the finer ladder's phases (here 1, 2, 3, 4, 6), with the same outputs; JAX keeps the ladder.
    monkeypatch.setattr(phases_module, "FINER_PHASE_CAPACITIES", (1, 2, 3, 4, 6))
    capacities, ladders = phases_module._phase_capacities, []
    monkeypatch.setattr(phases_module, "_phase_capacities", lambda length, bound=None, ladder=None: (
        ladders.append(ladder) or capacities(length, bound, ladder)))
    with phases_module.finer_phases():
        finer = as_numpy(runs[search]())
    assert ladders and set(ladders) == {(1, 2, 3, 4, 6) if phases_module.compacts(False) else None}
    for key in ("ids", "lengths"):
        np.testing.assert_array_equal(finer[key], whole[key])
    np.testing.assert_allclose(finer["scores"], whole["scores"], rtol=1e-6, atol=1e-6)


def test_a_compiled_search_traces_only_the_phases_its_width_can_reach(monkeypatch):
    """A batch 10 wide with 8 extra positions (an 18-position buffer) decodes
    in two phases (room for 16, then 18), and its compiled search holds just
    those on every backend: on TensorFlow too, whose graph has a dynamic
    width (a trace for any width holds all five rungs' phases: 6-7 CPU-s
    for a tiny model where 2 do), since `compiled.run` traces per width
    class. The same sentences padded to 40 (another class) give the same
    outputs."""
    capacities, traced = phases_module._phase_capacities, []

    def recording(buffer_length, buffer_bound=None, ladder=None):
        traced.append(len(capacities(buffer_length, buffer_bound, ladder)))
        return capacities(buffer_length, buffer_bound, ladder)

    monkeypatch.setattr(phases_module, "_phase_capacities", recording)
    model = make_model(vocabulary_size=9, num_encoder_layers=1, num_decoder_layers=1, eos_scale=0.5, seed=6)
    source = make_sources(vocabulary_size=9, lengths=(3, 10, 2, 4), seed=2)
    short = as_numpy(beam_search(model, source, beam_size=2, max_extra_length=8))
    assert traced == [2]
    padded = as_numpy(beam_search(model, np.pad(source, ((0, 0), (0, 30))), beam_size=2, max_extra_length=8))
    assert len(traced) == 2 and traced[1] >= 3  # 16, 32, 48 (TensorFlow: and 64, capped at 48)
    np.testing.assert_array_equal(padded["ids"][:, :18], short["ids"])
    assert np.all(padded["ids"][:, 18:] == PAD)
    np.testing.assert_array_equal(padded["lengths"], short["lengths"])
    np.testing.assert_allclose(padded["scores"], short["scores"], rtol=1e-6, atol=1e-6)


@pytest.mark.usefixtures("one_phase_search")  # buffers of at most 16 positions (conftest)
def test_cached_step_follows_pre_layer_norm_models(source):
    model = make_model(norm_first=True)  # a final LayerNorm and the pre-LN wiring
    cached = as_numpy(beam_search(model, source, beam_size=2, max_extra_length=2))
    uncached = as_numpy(beam_search(model, source, beam_size=2, max_extra_length=2, use_cache=False))
    np.testing.assert_array_equal(cached["ids"], uncached["ids"])
    np.testing.assert_allclose(cached["scores"], uncached["scores"], rtol=1e-5, atol=1e-5)


def check_hypotheses(ids, lengths, limits):
    """EOS ends a hypothesis, pad follows, no special token inside, limits hold."""
    for row in range(ids.shape[0]):
        length = int(lengths[row])
        assert 1 <= length <= limits[row]
        body, tail = ids[row, :length], ids[row, length:]
        assert np.all(tail == PAD)
        assert not np.isin(body[:-1], [PAD, BOS, EOS]).any()
        assert body[-1] not in (PAD, BOS)
        if body[-1] != EOS:
            assert length == limits[row]  # cut at the limit, never extended past it


@pytest.mark.usefixtures("one_phase_search")  # buffers of at most 16 positions (conftest)
@pytest.mark.parametrize("limit_rule", ["fallback", "finish"])
def test_finished_hypotheses_are_not_extended_and_limits_hold(limit_rule, model, source):
    limits = limits_of(source)
    greedy = as_numpy(greedy_search(model, source, max_extra_length=EXTRA, limit_rule=limit_rule))
    check_hypotheses(greedy["ids"], greedy["lengths"], limits)
    beams = as_numpy(beam_search(model, source, max_extra_length=EXTRA, return_all_beams=True,
                                 limit_rule=limit_rule))
    assert beams["ids"].shape == (4, 4, source.shape[1] + EXTRA)
    filled = np.isfinite(beams["scores"])
    for row in range(4):
        kept = int(filled[row].sum())
        assert kept >= 1 and filled[row, :kept].all()  # filled slots first
        check_hypotheses(beams["ids"][row, :kept], beams["lengths"][row, :kept], [limits[row]] * kept)
        assert np.all(beams["ids"][row, kept:] == PAD) and np.all(beams["lengths"][row, kept:] == 0)
        ended = (beams["ids"][row, :kept] == EOS).any(axis=1)
        if limit_rule == "fallback":
            # Cut hypotheses only where none ended, and then all of them.
            assert ended.all() or not ended.any()
    # Beams are sorted best first and the reported scores are log P / lp(length).
    scores = np.where(filled, beams["scores"], -1e30)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)
    np.testing.assert_allclose(
        beams["scores"][filled], (beams["log_probs"] / gnmt_penalty(beams["lengths"], 0.6))[filled],
        rtol=1e-5, atol=1e-5,
    )
    ended = (beams["ids"] == EOS).any(axis=2)
    if limit_rule == "finish":
        # The fixture mixes hypotheses ended by EOS and cut at the limit.
        assert ended.any() and not ended[filled].all()
    else:
        # Under the default rule the fixture's outputs all end with EOS.
        assert ended[filled].all()


def test_top_k_keeps_ties_in_index_order():
    """`top_k` against numpy's stable sort on rows full of ties and -inf
    (what n-gram blocking and forced prefixes leave), k from 1 to the row's
    width: under PyTorch it is built from torch.topk and sorts of k entries."""
    rng = np.random.default_rng(0)
    for _ in range(60):
        rows, width = int(rng.integers(1, 5)), int(rng.integers(2, 30))
        k = int(rng.integers(1, width + 1))
        x = rng.integers(-3, 3, size=(rows, width)).astype("float32")
        x[rng.random((rows, width)) < 0.25] = -np.inf
        values, ids = candidates_module.top_k(keras.ops.convert_to_tensor(x), k)
        expected = np.argsort(-x, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(to_numpy(ids), expected)
        np.testing.assert_array_equal(to_numpy(values), np.take_along_axis(x, expected, axis=1))


@pytest.mark.parametrize("vocabulary_size", [1031, 8000])  # a prime (padded blocks), and blocks of 80
@pytest.mark.parametrize("min_length", [0, 3])
def test_blockwise_top_k_equals_a_full_sort(vocabulary_size, min_length):
    rng = np.random.default_rng(vocabulary_size + min_length)
    logits = rng.normal(size=(5, vocabulary_size)).astype("float32")
    logits[0, [5, 700, 1000]] = 9.0  # a tie across blocks
    logits[1, [PAD, BOS, EOS]] = 20.0  # the largest logits on banned ids
    logits[2] = np.round(logits[2])  # ties everywhere
    logits[3, -3:] = 12.0  # the best tokens in the last (padded) block
    values, ids, normalizers = candidates_module._top_k_and_logsumexp(
        keras.ops.convert_to_tensor(logits), 4, keras.ops.convert_to_tensor(1, "int32"),
        bos_id=BOS, eos_id=EOS, pad_id=PAD, min_length=min_length,
    )
    allowed = logits.astype("float64")
    allowed[:, [PAD, BOS]] = -np.inf
    if min_length > 1:  # step 1 < min_length: EOS is banned too
        allowed[:, EOS] = -np.inf
    expected_ids = np.argsort(-allowed, axis=1, kind="stable")[:, :4]  # ties: lower id first
    ids = to_numpy(ids)
    np.testing.assert_array_equal(to_numpy(values), np.take_along_axis(logits, expected_ids, axis=1))
    # Ties go to the lower id on every backend (torch.topk alone keeps no order).
    np.testing.assert_array_equal(ids, expected_ids)
    shifted = logits.astype("float64") - logits.max(1, keepdims=True)
    expected_normalizers = logits.max(1) + np.log(np.exp(shifted).sum(1))
    np.testing.assert_allclose(to_numpy(normalizers), expected_normalizers, rtol=1e-6, atol=1e-5)


# 1: each token once, bans at every step; under PyTorch only (20 s of compiling on TF and JAX, where
# tests/test_blocked_candidates.py runs the same blocked candidates compiled), not a skip that hides a check.
@pytest.mark.usefixtures("one_phase_search")  # buffers of at most 16 positions (conftest)
@pytest.mark.parametrize("no_repeat_ngram_size", [0, 1] if keras.backend.backend() == "torch" else [0])
def test_beam_search_with_blockwise_top_k_equals_plain_top_k(no_repeat_ngram_size, monkeypatch):
    # Two models with the same weights (compiled searches are kept per model).
    vocabulary_size = 1031
    blockwise, plain = (make_model(vocabulary_size=vocabulary_size, eos_scale=1.0) for _ in range(2))
    source = make_sources(vocabulary_size=vocabulary_size)
    options = dict(max_extra_length=EXTRA, return_all_beams=True, no_repeat_ngram_size=no_repeat_ngram_size)
    assert vocabulary_size >= candidates_module.BLOCKWISE_TOP_K_MIN_VOCABULARY
    with_blocks = as_numpy(beam_search(blockwise, source, **options))
    monkeypatch.setattr(candidates_module, "BLOCKWISE_TOP_K_MIN_VOCABULARY", 10**9)
    without = as_numpy(beam_search(plain, source, **options))
    np.testing.assert_array_equal(with_blocks["ids"], without["ids"])
    np.testing.assert_array_equal(with_blocks["lengths"], without["lengths"])
    np.testing.assert_allclose(with_blocks["scores"], without["scores"], rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("one_phase_search")  # buffers of at most 16 positions (conftest)
def test_padding_columns_change_nothing(model, source):
    """A sentence decodes the same whatever the longest sentence of its batch."""
    wider = np.pad(source, ((0, 0), (0, 3)))
    for search in (greedy_search, beam_search):
        narrow = as_numpy(search(model, source, max_extra_length=EXTRA))
        wide = as_numpy(search(model, wider, max_extra_length=EXTRA))
        width = narrow["ids"].shape[1]
        np.testing.assert_array_equal(wide["ids"][:, :width], narrow["ids"])
        assert np.all(wide["ids"][:, width:] == PAD)
        np.testing.assert_allclose(wide["scores"], narrow["scores"], rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("one_phase_search")  # buffers of at most 16 positions (conftest)
def test_absolute_max_length_caps_outputs(model, source):
    # min_length forbids EOS throughout, so outputs run to their limit.
    greedy = as_numpy(greedy_search(model, source, max_extra_length=50, max_output_length=4, min_length=60, compile=False))
    assert greedy["ids"].shape == (4, 4)
    np.testing.assert_array_equal(greedy["lengths"], 4)
    assert not np.isin(greedy["ids"], [PAD, BOS, EOS]).any()
    beam = as_numpy(beam_search(model, source, max_extra_length=2, max_output_length=6, min_length=60, compile=False))
    assert beam["ids"].shape == (4, 6)  # min(6 + 2, 6)
    np.testing.assert_array_equal(beam["lengths"], np.minimum(limits_of(source, 2), 6))


@pytest.mark.usefixtures("one_phase_search")  # buffers of at most 16 positions (conftest)
def test_min_length_forbids_early_eos(model, source):
    free = as_numpy(greedy_search(model, source, max_extra_length=EXTRA))
    assert np.any(free["lengths"] < 3)  # EOS comes early without the constraint
    forced = as_numpy(greedy_search(model, source, max_extra_length=EXTRA, min_length=3, compile=False))
    assert np.all(forced["lengths"] >= 4)  # EOS, if any, comes after 3 tokens
    assert not np.any(forced["ids"][:, :3] == EOS)
    beam = as_numpy(beam_search(model, source, max_extra_length=EXTRA, min_length=3, compile=False))
    assert np.all(beam["lengths"] >= 4)


def test_length_penalty_is_gnmt():
    lengths = np.array([1, 4, 10])
    np.testing.assert_allclose(to_numpy(length_penalty(lengths, 0.6)), ((5 + lengths) / 6) ** 0.6, rtol=1e-6)
    np.testing.assert_allclose(to_numpy(length_penalty(lengths, 0.0)), 1.0)


def test_bad_arguments_are_named(model, source):
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, source, beam_size=0)
    with pytest.raises(ValueError, match="alpha"):
        beam_search(model, source, alpha=-1.0)
    with pytest.raises(ValueError, match="source_ids"):
        greedy_search(model, source[0])
    with pytest.raises(ValueError, match="max_extra_length"):
        greedy_search(model, source, max_extra_length=-1)
    with pytest.raises(ValueError, match="eos_id"):
        greedy_search(model, source, eos_id=99)


def output_tokens(ids, length):
    return [int(t) for t in ids[:length]]


def test_bad_constraints_are_named(model, source):
    with pytest.raises(ValueError, match="no_repeat_ngram_size"):
        greedy_search(model, source, no_repeat_ngram_size=-1)
    with pytest.raises(ValueError, match="prefix_ids.*row 1.*id 3"):
        beam_search(model, source, prefix_ids=np.array([[5, 0], [EOS, 0], [0, 0], [0, 0]]))
    with pytest.raises(ValueError, match="prefix_ids.*row 0.*id 0"):
        greedy_search(model, source, prefix_ids=np.array([[0, 5], [0, 0], [0, 0], [0, 0]]))
    with pytest.raises(ValueError, match="prefix_ids.*3 rows"):
        greedy_search(model, source, prefix_ids=np.zeros((3, 2), "int32"))


@pytest.mark.usefixtures("one_phase_search")  # buffers of at most 16 positions (conftest)
@pytest.mark.parametrize("vocabulary_size", [12, 1031])  # the plain and the blockwise path
def test_ties_go_to_the_lower_id_and_the_earlier_beam(vocabulary_size):
    """Every token equally likely: the search's tie rule (the earlier beam,
    then the lower id) decides everything, on every backend."""
    from keras import ops

    from keras_transformer.decoding import StepFunction

    def uniform(source_ids, inputs, step):
        return ops.zeros((ops.shape(inputs)[0], vocabulary_size), "float32")

    model = StepFunction(uniform, vocabulary_size)
    source = np.array([[EOS, PAD], [5, EOS]], "int32")  # limits 3 and 4
    greedy = as_numpy(greedy_search(model, source, max_extra_length=2))
    # The lowest allowed id is unk (1): pad 0 and BOS 2 are banned; EOS 3 never wins.
    np.testing.assert_array_equal(greedy["ids"][:, :4], [[1, 1, 1, 0], [1, 1, 1, 1]])
    beams = as_numpy(beam_search(model, source, beam_size=3, alpha=0.0, max_extra_length=2,
                                 return_all_beams=True))
    # Each step's extensions tie: the earlier beam and the lower id go
    # first, so the first beam is always 1, 1, ...; shorter finished ones
    # score better (alpha 0).
    for row in range(2):
        assert [output_tokens(beams["ids"][row, k], beams["lengths"][row, k]) for k in range(3)] == \
            [[EOS], [1, EOS], [1, 1, EOS]]
