"""The vocabulary shortlist: its builder on a hand-worked corpus, its file,
and searches with it against the plain search (a list of every piece) and
against an independent reference (a full-vocabulary search on logits where
unlisted pieces are -inf), on every backend."""

import numpy as np
import pytest
from keras import ops

from conftest import to_numpy
from keras_transformer.decoding import StepFunction, beam_search, greedy_search, shortlisted
from keras_transformer.decoding.shortlist import Shortlist
from test_search import make_model, make_sources

# Buffers of at most 16 positions: one phase at run time on every backend, and traced as one (conftest).
pytestmark = pytest.mark.usefixtures("one_phase_search")

VOCABULARY = 40


def test_builder_keeps_the_best_dice_pieces_and_the_most_frequent():
    # Worked by hand: c(s) = {4: 2, 5: 2, 6: 1}, c(t) = {10: 2, 11: 2, 12: 1, 13: 1}.
    # Dice 2c(s,t)/(c(s)+c(t)): 4 -> 10: 1.0, 12: 0.67, 11: 0.5 (a raw count would keep 11, tied with 12);
    # 5 -> 11: 1.0, 13: 0.67, 10: 0.5; 6 -> 13: 1.0, 11: 0.67. Most frequent: 10 and 11 tie, 10 is smaller.
    pairs = [([4, 5, 3], [10, 11]), ([4], [10, 12]), ([5, 6], [11, 13])]  # EOS (3) is ignored
    shortlist = Shortlist.build(pairs, 8, 16, per_source=2, frequent=1)
    assert shortlist.table[4].tolist() == [10, 12]
    assert shortlist.table[5].tolist() == [11, 13]
    assert shortlist.table[6].tolist() == [13, 11]
    assert shortlist.table[7].tolist() == [-1, -1]
    assert shortlist.always.tolist() == [0, 1, 2, 3, 10]
    ids, count = shortlist.candidates([[6, 3, 0]], multiple=4)
    assert ids.tolist() == [0, 1, 2, 3, 10, 11, 13, 0] and count == 7
    ids, count = shortlist.candidates([[6, 3, 0]], extra_ids=[[15, 0]], multiple=1)
    assert ids.tolist() == [0, 1, 2, 3, 10, 11, 13, 15] and count == 8


def test_file_round_trip_is_byte_identical_and_bad_files_name_the_line(tmp_path):
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(4, 30, 6), rng.integers(4, 50, 7)) for _ in range(40)]
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    Shortlist.build(pairs, 30, 50, per_source=5, frequent=3).save(first)
    loaded = Shortlist.load(first)
    loaded.save(second)
    assert first.read_bytes() == second.read_bytes()
    Shortlist.build(pairs, 30, 50, per_source=5, frequent=3).save(second)
    assert first.read_bytes() == second.read_bytes()  # deterministic
    lines = first.read_text().splitlines()
    lines[10] = "3: 7 x"
    first.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"a\.txt:11: expected '3: <target ids>'"):
        Shortlist.load(first)
    lines[10] = "3: 7 99"
    first.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="a.txt: .*outside the target vocabulary of 50"):
        Shortlist.load(first)


def test_default_size_and_the_one_coercion(tmp_path):
    # Always-kept pieces (the 4 special ids here) + 100 lists of the table's width (3), to the multiple.
    table = np.full((10, 3), 5, np.int32)
    assert Shortlist(table, [], 5000).default_size() == 384  # 304 -> a multiple of 128 (5,000 pieces)
    assert Shortlist(table, [], 1000).default_size() == 304  # a multiple of 8 under 2,048 pieces
    assert Shortlist(table, [], 200).default_size() == 200  # at most the vocabulary
    shortlist = Shortlist(table, [7], 200)
    assert shortlist.check_size(6) == 6
    with pytest.raises(ValueError, match="`shortlist_size` must be an int >= 6 .*got 5"):
        shortlist.check_size(5)
    path = tmp_path / "list.txt"
    shortlist.save(path)
    assert Shortlist.coerce(str(path)).table.tolist() == table.tolist() and Shortlist.coerce(shortlist) is shortlist
    assert Shortlist.coerce(None) is None
    with pytest.raises(TypeError, match="`shortlist` must be a Shortlist or its file's path, got int"):
        Shortlist.coerce(5)


@pytest.fixture(scope="module")
def model():
    # With an output bias (Marian's final_logits_bias): a shortlist projects onto its candidates' bias
    # too, and the masked reference below adds the whole vocabulary's.
    model = make_model(vocabulary_size=VOCABULARY, eos_scale=0.3, output_bias=True)
    model.output_bias.assign(np.random.default_rng(2).normal(size=VOCABULARY).astype("float32"))
    return model


@pytest.fixture(scope="module")
def source():
    return make_sources(VOCABULARY, lengths=(6, 2, 4))


def every_piece():
    return Shortlist(np.tile(np.arange(VOCABULARY, dtype=np.int32), (VOCABULARY, 1)), [], VOCABULARY)


def small_shortlist():
    table = np.random.default_rng(1).integers(4, VOCABULARY, size=(VOCABULARY, 2)).astype(np.int32)
    return Shortlist(table, [4, 9], VOCABULARY)


PREFIXES = np.array([[7, 8], [5, 0], [0, 0]], "int32")
# Every option a shortlist must keep working: n-best, n-gram blocking, min_length, prefixes
# (a short buffer: one decoding phase to trace).
SEARCHES = [
    (beam_search, dict(beam_size=3, return_all_beams=True, no_repeat_ngram_size=2, min_length=3,
                       prefix_ids=PREFIXES, max_extra_length=6)),
    (greedy_search, dict(no_repeat_ngram_size=2, min_length=4, prefix_ids=PREFIXES, max_extra_length=6)),
]
_PLAIN = {}


def plain(function, options, model, source):
    """The search without a shortlist, run once per configuration."""
    key = (function.__name__, tuple(sorted(options)))
    if key not in _PLAIN:
        _PLAIN[key] = run(function, model, source, **options)
    return _PLAIN[key]


def run(function, model, source, **options):
    return {key: to_numpy(value) for key, value in function(model, source, **options).items()}


def assert_same(expected, actual):
    assert np.array_equal(expected["ids"], actual["ids"])
    assert np.array_equal(expected["lengths"], actual["lengths"])
    np.testing.assert_allclose(expected["scores"], actual["scores"], rtol=1e-5, atol=1e-5)


# Each search in each space once across the two tests below (each case compiles its own searches).
@pytest.mark.parametrize("function, options, space", [SEARCHES[0] + ("full",), SEARCHES[1] + ("shortlist",)])
def test_a_list_of_every_piece_changes_nothing(space, function, options, model, source):
    expected = plain(function, options, model, source)
    assert (expected["lengths"] > 1).any()
    # `shortlisted.search` runs the plain search for a list this large: search the candidates directly.
    options = dict(options)
    prefix = options.pop("prefix_ids", None)
    ids, count = every_piece().candidates(to_numpy(source), prefix, multiple=1)
    assert count == len(ids) == VOCABULARY
    result = shortlisted.search_candidates(function, model, ids, count, source, prefix, space, **options)
    actual = {key: to_numpy(value) for key, value in result.items()}
    assert np.array_equal(expected["ids"], actual["ids"])
    assert np.array_equal(expected["lengths"], actual["lengths"])
    assert np.array_equal(expected["scores"], actual["scores"])


def masked_reference(model, allowed):
    """A full-vocabulary model whose logits are -inf outside `allowed`,
    written without the shortlist module: full forward passes on the inputs so far."""
    outside = np.full(VOCABULARY, -np.inf, np.float32)
    outside[allowed] = 0.0

    def tokens_to_logits(source_ids, inputs, step):
        logits = model({"source": source_ids, "target": inputs}, training=False)
        logits = ops.take(ops.cast(logits, "float32"), step, axis=1)
        return logits + ops.convert_to_tensor(outside)[None]

    return StepFunction(tokens_to_logits, VOCABULARY)


@pytest.mark.parametrize("function, options, space", [SEARCHES[0] + ("shortlist",), SEARCHES[1] + ("full",)])
def test_a_small_list_equals_a_search_on_masked_logits(space, function, options, model, source):
    shortlist = small_shortlist()
    listed = set(shortlist.always) | set(shortlist.table[np.unique(source)].reshape(-1))
    if "prefix_ids" in options:
        listed |= set(options["prefix_ids"].reshape(-1))
    assert len(listed) <= 28
    reference = run(function, masked_reference(model, sorted(listed)), source, **options)
    actual = {key: to_numpy(value) for key, value in
              shortlisted.search(function, model, shortlist, source, space=space, multiple=8, **options).items()}
    assert_same(reference, actual)
    assert np.isin(actual["ids"], sorted(listed)).all()
    assert not np.array_equal(plain(function, options, model, source)["ids"], actual["ids"])  # the list mattered


def test_xla_search_with_a_shortlist_reuses_its_compiled_search(model, source):
    shortlist = small_shortlist()
    shortlisted.search(greedy_search, model, shortlist, source, multiple=32, jit_compile=True, max_extra_length=6)
    other = make_sources(VOCABULARY, lengths=(5, 3, 4), seed=4)
    second = shortlisted.search(greedy_search, model, shortlist, other, multiple=32, jit_compile=True,
                                max_extra_length=6)
    stand_in = shortlisted.stand_in(model, 32, "shortlist")
    # The second batch is where a program holding the first batch's candidates would go wrong.
    reference = shortlisted.search(greedy_search, model, shortlist, other, multiple=32, max_extra_length=6)
    assert np.array_equal(to_numpy(second["ids"]), to_numpy(reference["ids"]))
    assert not np.array_equal(*(shortlist.candidates(batch, multiple=32)[0] for batch in (source, other)))
    from keras_transformer.decoding.compiled import _COMPILED

    assert len([key for key in _COMPILED[stand_in] if key[0] == "one hypothesis" and key[3]]) == 1  # one XLA program, both batches


def test_bad_shortlists_are_named(model, source):
    with pytest.raises(ValueError, match="target vocabulary of 50 ids, the model has 40"):
        shortlisted.search(beam_search, model, Shortlist(np.zeros((40, 1), np.int32), [], 50), source)
    with pytest.raises(ValueError, match=r"source ids must lie in \[0, 5\)"):
        shortlisted.search(beam_search, model, Shortlist(np.zeros((5, 1), np.int32), [], VOCABULARY), source)
    with pytest.raises(ValueError, match="`space` must be one of"):
        shortlisted.search(beam_search, model, every_piece(), source, space="sparse")
