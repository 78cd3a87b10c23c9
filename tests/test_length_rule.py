"""The "length" rule (log P / |Y| ** alpha, Marian's and Transformers'),
beside GNMT's penalty (backend-agnostic: run under tensorflow, jax and
torch): n-best lists and `Translator.score` against numpy log-probabilities
of a bigram model, and the rule reaching the search from the command line's
`--length-penalty` and the run's `decoding.length_penalty`, and (torch)
the search against Transformers' `generate` under docs/decoding.md's
flags. The search itself is checked against independent references in
test_search_references.py; the SavedModel's rule in tests/tf/test_export.py.
"""

import numpy as np
import pytest

from keras_transformer import config as config_lib
from keras_transformer.decoding import LENGTH_PENALTIES, Translator, length_penalty
from keras_transformer.decoding.options import check_length_penalty
from test_combined_options import VOCABULARY, bigram_model, bigram_table, log_softmax, next_logits
from test_n_best import PieceTokenizer

EOS = 3
TEXTS = ["abc", "d", "fxa", "bb", "cadeb"]
EXTRA = 5  # outputs of at most 11 tokens: within the bigram table's positions


def reference_log_prob(table, tokens):
    """log P of `tokens` then EOS under the bigram table (float64)."""
    total, prefix = 0.0, []
    for token in list(tokens) + [EOS]:
        total += log_softmax(next_logits(table, prefix))[token]
        prefix.append(token)
    return total


@pytest.fixture(scope="module")
def tables():
    return [bigram_table(seed, eos_weight=0.4) for seed in range(2)]


def n_best(table, rule, alpha=1.0, beam_size=4):
    # force_eos: every hypothesis ends with EOS, even at its limit (the
    # length rule favours long ones), so each scores log P / (tokens + 1).
    translator = Translator(bigram_model(table), PieceTokenizer(), beam_size=beam_size, alpha=alpha,
                            max_extra_length=EXTRA, length_penalty=rule, limit_rule="force_eos")
    return translator, translator.decode_ids(translator.source_ids(TEXTS), n_best=beam_size)


def test_the_rules_by_hand():
    """3 tokens and EOS: GNMT's ((5 + 4) / 6) ** 0.6, the length rule's 4 ** 0.6; alpha 0 is 1 under both."""
    assert LENGTH_PENALTIES == ("gnmt", "length")
    from keras.ops import convert_to_numpy  # (tests/conftest's to_numpy: the name `conftest` is tests/tf's
    # once that module is loaded, as in the TensorFlow run)

    assert float(convert_to_numpy(length_penalty(4, 0.6))) == pytest.approx(1.5 ** 0.6)
    assert float(convert_to_numpy(length_penalty(4, 0.6, "length"))) == pytest.approx(4 ** 0.6)
    assert float(convert_to_numpy(length_penalty(4, 0.0, "length"))) == 1.0
    with pytest.raises(ValueError, match="`length_penalty` must be one of 'gnmt', 'length', got 'marian'"):
        check_length_penalty("marian")
    with pytest.raises(ValueError, match="`length_penalty`"):
        Translator(bigram_model(bigram_table(0)), PieceTokenizer(), length_penalty="average")


def test_n_best_scores_and_order_under_the_length_rule(tables):
    """Every kept hypothesis scores its numpy log P (EOS included) over
    (tokens + 1) ** alpha, best first (`Translator.decode_ids`, what
    `translate(n_best=...)` builds on); and the rule decides: GNMT's
    penalty ranks some list differently. (Forced decoding under the rule:
    test_scoring.py.)"""
    differ = 0
    for table in tables:
        _, decoded = n_best(table, "length", alpha=1.0)
        _, gnmt_decoded = n_best(table, "gnmt", alpha=1.0)
        for hypotheses, gnmt_hypotheses in zip(decoded, gnmt_decoded):
            assert len(hypotheses) >= 2
            scores = [score for _, score, _ in hypotheses]
            assert scores == sorted(scores, reverse=True)
            for tokens, score, log_prob in hypotheses:
                expected = reference_log_prob(table, tokens)
                assert log_prob == pytest.approx(expected, abs=1e-4)
                assert score == pytest.approx(expected / (len(tokens) + 1), abs=1e-4)
            differ += [t for t, _, _ in hypotheses] != [t for t, _, _ in gnmt_hypotheses]
    assert differ > 0


def test_the_command_line_and_the_config_give_the_search_its_rule(tables):
    """`--length-penalty` (translate's parser) and `--set
    decoding.length_penalty=...` reach the search through the run's
    decoding settings (`make_translator`, as `translate` and `evaluate`
    build it): the translations are those of a Translator given the rule,
    and here the two rules translate some text differently."""
    from keras_transformer import cli
    from keras_transformer.cli import commands as cli_commands
    from keras_transformer.run.translate import translate_texts

    model = bigram_model(tables[1])
    parser = cli.build_parser()

    def translated(decoding):
        return translate_texts(model, PieceTokenizer(), TEXTS, decoding)

    def direct(rule):
        return Translator(model, PieceTokenizer(), beam_size=4, alpha=1.0, max_extra_length=EXTRA,
                          length_penalty=rule).translate(TEXTS)

    base = config_lib.defaults()
    assert base["decoding"]["length_penalty"] == "gnmt"
    outputs = {}
    for rule in LENGTH_PENALTIES:
        args = parser.parse_args(["translate", "RUN", "--alpha", "1", "--max-extra-length", str(EXTRA),
                                  "--length-penalty", rule])
        from_flag = cli_commands._apply_decoding(base, args)["decoding"]
        from_config = config_lib.resolve(assignments=[f"decoding.length_penalty={rule}", "decoding.alpha=1.0",
                                                      f"decoding.max_extra_length={EXTRA}"])
        assert from_flag["length_penalty"] == from_config["decoding"]["length_penalty"] == rule
        outputs[rule] = translated(from_flag)
        assert translated(from_config["decoding"]) == outputs[rule] == direct(rule)
    assert outputs["gnmt"] != outputs["length"]
    with pytest.raises(config_lib.ConfigError, match="decoding.length_penalty"):
        config_lib.resolve(assignments=["decoding.length_penalty=average"])


def test_equals_transformers_generate_with_early_stopping_never():
    """docs/decoding.md's recipe, against Transformers' own beam search: a
    tiny random MarianMTModel drives our search (a StepFunction over its
    full forward pass; ids as Marian's: EOS 0, decoding started from the
    pad token, id 1 stands for our pad and is banned on both sides).
    Under `length_penalty="length"`, `limit_rule="finish"` and
    `max_output_length` = `max_new_tokens`, the outputs and scores equal
    `generate(num_beams=4, early_stopping="never", forced_eos_token_id=None)`
    (cut at the limit and EOS-ended alike); its default early stop
    (`early_stopping=False`) returns a worse hypothesis for the model of
    seed 4, where Transformers stops before the best one finishes."""
    import keras

    if keras.backend.backend() != "torch":
        pytest.skip("drives a torch model from the search: the torch backend, eager")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from keras import ops

    from keras_transformer.decoding import StepFunction, beam_search

    vocabulary, limit, eos, start, our_pad = 24, 10, 0, 23, 1
    compared, stopped_early = 0, 0
    for seed in (0, 2, 4):
        torch.manual_seed(seed)
        config = transformers.MarianConfig(
            vocab_size=vocabulary, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, pad_token_id=start,
            eos_token_id=eos, decoder_start_token_id=start, max_position_embeddings=64, forced_eos_token_id=None,
            activation_function="swish")
        marian = transformers.MarianMTModel(config).eval()
        with torch.no_grad():  # peaked distributions and an EOS bias: runs of tokens, some ending, some cut
            marian.model.shared.weight.mul_(6.0)
            marian.final_logits_bias[0, eos] = -1.0 + 0.5 * seed
        rng = np.random.default_rng(seed)
        sources = [list(rng.integers(2, start, size=n)) + [eos] for n in (3, 5, 2)]
        width = max(map(len, sources))
        ours_source = np.array([s + [our_pad] * (width - len(s)) for s in sources], "int32")

        def tokens_to_logits(source_ids, inputs, step, marian=marian):
            source = torch.as_tensor(source_ids).long()
            mask = (source != our_pad).long()
            with torch.no_grad():
                output = marian(input_ids=torch.where(mask.bool(), source, start), attention_mask=mask,
                                decoder_input_ids=torch.as_tensor(inputs)[:, : int(step) + 1].long())
            return output.logits[:, -1].float()

        ours = beam_search(StepFunction(tokens_to_logits, vocabulary, pad_id=our_pad), ours_source, beam_size=4,
                           alpha=1.0, length_penalty="length", limit_rule="finish", max_extra_length=100,
                           max_output_length=limit, bos_id=start, eos_id=eos, pad_id=our_pad, compile=False)
        ids, lengths, scores = (ops.convert_to_numpy(ours[key]) for key in ("ids", "lengths", "scores"))
        hf_source = torch.tensor([s + [start] * (width - len(s)) for s in sources])
        for early_stopping in ("never", False):
            with torch.no_grad():
                theirs = marian.generate(
                    input_ids=hf_source, attention_mask=(hf_source != start).long(), num_beams=4,
                    length_penalty=1.0, early_stopping=early_stopping, max_new_tokens=limit, do_sample=False,
                    bad_words_ids=[[our_pad], [start]], forced_eos_token_id=None, return_dict_in_generate=True,
                    output_scores=True)
            for row in range(len(sources)):
                tokens = [int(t) for t in theirs.sequences[row][1:] if t != start]  # start: Marian's pad
                tokens = tokens[: tokens.index(eos) + 1] if eos in tokens else tokens
                same = tokens == ids[row, : lengths[row]].tolist()
                if early_stopping == "never":
                    compared += 1
                    assert same, (seed, row)
                    assert float(theirs.sequences_scores[row]) == pytest.approx(float(scores[row]), abs=1e-5)
                elif not same:
                    stopped_early += 1
                    assert float(theirs.sequences_scores[row]) < float(scores[row])  # stopped before our best
    assert compared == 9 and stopped_early > 0
