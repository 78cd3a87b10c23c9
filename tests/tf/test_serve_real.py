"""benchmarks/serve.py --real-text, its core pieces without the shared corpus: the request stream, the check that
contenders which should agree give the same texts, the length-ratio gate, and the table of a record."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import serve  # noqa: E402
from benchmarks._report_serve import serve_real_gate_table, serve_real_table  # noqa: E402


def test_requests_keep_the_sources_in_order_in_requests_of_the_batch_size():
    sources = [f"sentence {index}" for index in range(35)]
    requests = serve.requests_of(sources, 16)
    assert [len(request) for request in requests] == [16, 16, 3]
    assert [text for request in requests for text in request] == sources


@pytest.fixture(scope="module")
def stream():
    """Each contender's texts for 8 synthetic English sources in requests of 4, as the benchmark streams them."""
    import keras

    import keras_transformer as kt
    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.datasets.synthetic_en_de import generate_pairs
    from keras_transformer.decoding import Translator

    pairs = generate_pairs(200, seed=0)
    tokenizer = SubwordTokenizer.train(pairs, 120, hard_vocab_limit=False, seed=0)
    requests = serve.requests_of([source for source, _ in pairs[:8]], 4)

    def model(seed):  # untrained: its outputs run to the length limit, which shows an option that differs
        keras.utils.set_random_seed(seed)
        built = kt.Transformer(vocabulary_size=tokenizer.vocabulary_size, d_model=16, num_heads=2, d_ff=32,
                               num_encoder_layers=1, num_decoder_layers=1, dropout=0.0)
        built.build()
        return built

    def texts(translator):
        return [text for request in requests for text in translator.translate(request)]

    # Greedy, and one model whose weights are swapped for another's: two compiled searches, not four.
    shared, other = model(3), model(4)
    found = {"a": texts(Translator(shared, tokenizer, beam_size=1, max_extra_length=4)),
             "a again": texts(Translator(shared, tokenizer, beam_size=1, max_extra_length=4, batch_size=2)),
             "other limit": texts(Translator(shared, tokenizer, beam_size=1, max_extra_length=2))}
    weights = shared.get_weights()
    shared.set_weights(other.get_weights())
    found["other model"] = texts(Translator(shared, tokenizer, beam_size=1, max_extra_length=4))
    shared.set_weights(weights)
    return found


def test_contenders_on_the_same_model_and_options_give_the_same_texts(stream):
    [found] = serve.differences(stream, ["a", "a again"])
    assert found == {"pair": ["a", "a again"], "differing": 0, "of": 8, "chrf_between": 100.0}


@pytest.mark.parametrize("other", ["other model", "other limit"])
def test_the_equality_check_counts_the_texts_of_another_model_or_option(stream, other):
    found = serve.differences(stream, ["a", "a again", other])
    assert [entry["pair"] for entry in found] == [["a", "a again"], ["a", other], ["a again", other]]
    assert found[0]["differing"] == 0
    assert 0 < found[1]["differing"] == found[2]["differing"] <= 8 and found[1]["chrf_between"] < 100


def test_the_gate_refuses_a_model_whose_outputs_end_elsewhere_or_loop():
    for ratio in (0.8, 1.2):
        assert serve.check_gate({"length_ratio": ratio, "at_limit": 0.02}) is None
    for ratio in (0.5, 1.25):
        assert re.search(rf"length ratio is {ratio:.3f}, outside 0.8-1.2.*--allow-any-length",
                         serve.check_gate({"length_ratio": ratio, "at_limit": 0.0}))
        assert serve.check_gate({"length_ratio": ratio, "at_limit": 0.0}, allow_any=True) is None
    # A ratio within the range made of loops and early stops is refused too.
    assert re.search(r"length limit in 2.5% of the validation sentences \(at most 2%\)",
                     serve.check_gate({"length_ratio": 1.0, "at_limit": 0.025}))


def contender(path, precision, shortlist, seconds, tokens=100, bleu=20.0):
    return {"path": path, "precision": precision, "shortlist": shortlist, "seconds": seconds,
            "target_tokens": tokens, "bleu": bleu, "chrf": 40.0}


def test_the_table_gives_each_contender_its_like_for_like_ratio_to_ctranslate2_int8():
    record = {
        "command": "python benchmarks/serve.py --real-text --preset tiny", "commit": "abc1234",
        "time": "2026-11-27 23:00:00 UTC", "machine": {"cpu": "Some CPU", "cpus": 2},
        "load_average": {"before": [1.0], "after": [1.5]},
        "workload": {"preset": "tiny", "train_steps": 600, "gate": {"length_ratio": 0.97}, "smoke": True,
                     "length_ratio_allowed_any": False, "stream": "the first 40 sources", "sentences": 40,
                     "batch": 16, "threads": 2, "decoding": {"beam_size": 4, "alpha": 0.6, "length_penalty": "length"}},
        "contenders": {
            # 40 sentences: 2 s a round is 20 sentences/s; 100 tokens in 2 s, 50 tokens/s.
            "SavedModel plain, float32": contender("plain graph, SavedModel", "float32", False, [2.0, 4.0, 2.0]),
            "SavedModel XLA, int8 + shortlist": contender("XLA, SavedModel", "int8", True, [1.0, 1.0, 1.0]),
            "CTranslate2 int8": contender("CTranslate2 (C++)", "int8", False, [1.0, 1.0, 2.0]),
            "CTranslate2 int8 + vmap": contender("CTranslate2 (C++)", "int8", True, [0.5, 0.5, 0.5]),
        }}
    table = serve_real_table([record], {})
    assert "SMOKE RECORD" in table and "tiny preset trained 600 steps" in table and "ratio 0.97" in table
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in table.splitlines()[-4:]}
    # Same-round ratios to CTranslate2 int8: 0.5, 0.25, 1.0 (median 0.5); to int8 + vmap: 0.5 each round.
    assert rows["SavedModel plain, float32"] == ["plain graph, SavedModel", "float32", "no", "20.0", "50",
                                                 "0.50x", "-", "20.0 |"]
    assert rows["SavedModel XLA, int8 + shortlist"][3:6] == ["40.0", "100", "0.50x"]
    assert rows["CTranslate2 int8"][5] == "1.00x"


def test_a_refused_model_is_recorded_and_the_gate_table_gives_where_each_run_stood(tmp_path):
    run = tmp_path / "real-text-base-8000"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"training": {"mixed_precision": "mixed_bfloat16",
                                                              "tokens_per_batch": 1024}}))
    (run / "progress.jsonl").write_text("\n".join(json.dumps(row) for row in (
        {"step": 7900, "loss": 4.5}, {"step": 8000, "val_loss": 4.553, "val_masked_accuracy": 0.27},
        {"step": 8000, "loss": 4.4})) + "\n")
    assert serve.training_state(run) == {"steps": 8000, "precision": "mixed_bfloat16", "tokens_per_batch": 1024,
                                         "validated_at": 8000, "val_loss": 4.553, "val_masked_accuracy": 0.27}
    common = {"command": "python benchmarks/serve.py --real-text", "commit": "abc1234", "machine": {"cpu": "Some CPU",
              "cpus": 2}}
    timed = dict(common, time="2026-11-27 23:00:00 UTC", workload={"preset": "tiny", "train_steps": 2000, "gate": {
        "length_ratio": 0.966, "bleu": 5.24, "sentences": 500}})  # an older record: no at_limit, no training
    refused = dict(common, time="2026-11-28 09:40:00 UTC", refused="the model's output/reference length ratio ...",
                   workload={"preset": "base", "train_steps": 8000, "training": serve.training_state(run), "gate": {
                       "length_ratio": 1.31301, "at_limit": 0.146, "bleu": 4.52, "sentences": 500}})
    decoded = dict(refused, time="2026-11-28 13:00:00 UTC", workload=dict(refused["workload"], train_steps=12000, gate={
        "length_ratio": 1.181, "at_limit": 0.128, "bleu": 5.32, "sentences": 500, "precision": "float32"}))
    table = serve_real_gate_table([timed, decoded, refused], {})
    assert "500 sentences" in table and f"within {serve.RATIO_RANGE[0]}-{serve.RATIO_RANGE[1]}" in table
    assert f"at most {serve.AT_LIMIT_MAX:.0%} of its outputs" in table
    rows = [line.split(" | ") for line in table.splitlines()[-3:]]  # by preset and steps
    # A gate that names no precision decoded the model as saved: in bfloat16 where it trained in mixed bfloat16.
    assert rows[0] == ["| base", "8,000", "mixed_bfloat16", "bfloat16", "4.55", "1.313", "14.6%", "4.5", "refused |"]
    assert rows[1] == ["| base", "12,000", "mixed_bfloat16", "float32", "4.55", "1.181", "12.8%", "5.3", "refused |"]
    assert rows[2] == ["| tiny", "2,000", "-", "-", "-", "0.966", "-", "5.2", "timed |"]
    with pytest.raises(ValueError, match="gate refusals, with no timings"):
        serve_real_table([refused], {})


def test_sentence_steps_count_the_work_each_dropping_rule_carries():
    """Worked by hand, phases of 16, 32, 64, 128 positions: a request of outputs 3, 20 and 40 tokens long, then one
    of 5. Each step: 3 + 20 + 40 + 5. At phase boundaries: all 3 for 16 steps, the 2 longer for 16 more, the
    last for 8 (48 + 32 + 8), then 5. XLA pads 3 rows to 8 and 1 to 8: one bucket decodes 8 rows to the longest
    (8 x 40 + 8 x 5); three (8, 4, 2) decode 8 for 16 steps, then 2 (the smallest holding 2, then 1): 128 + 32
    + 16, then 8 x 5."""
    lengths, requests = [3, 20, 40, 5], [3, 1]
    assert serve.sentence_steps(lengths, requests, "each step") == 68
    assert serve.sentence_steps(lengths, requests, "phases") == 93
    # Finer phases (8, 16, 24, ...): all 3 for 8 steps, the 2 longer for 16 (to 24: the 20-token output ends within
    # the third phase), the last for 16 more (24 + 32 + 16), then 5.
    assert serve.sentence_steps(lengths, requests, "finer phases") == 77
    # The lengths come as numpy integers: the counts go into a JSON record.
    for rule in ("each step", "phases", "finer phases", 3):
        json.dumps(serve.sentence_steps(list(np.array(lengths) + 0), requests, rule))
    assert serve.sentence_steps(lengths, requests, 1) == 360
    assert serve.sentence_steps(lengths, requests, 3) == 216
    # Two 17-token outputs: two sentences for 17 steps; XLA with 2 buckets (8, 4): 8 rows for 16 steps, then 4.
    assert serve.sentence_steps([17, 17], [2], "phases") == 34 and serve.sentence_steps([17, 17], [2], 2) == 8 * 16 + 4


def test_a_longer_run_continues_from_the_longest_shorter_one(tmp_path):
    """Cached runs of 100 and 200 steps (and one of another preset, and a 300-step one with no checkpoint): a
    400-step run starts as a copy of the 200-step one, its manifest pointing at the copy; an existing one is kept."""
    for name, checkpoint in (("tiny-100", True), ("tiny-200", True), ("base-300", True), ("tiny-300", False)):
        folder = tmp_path / f"real-text-{name}"
        (folder / "checkpoints").mkdir(parents=True)
        (folder / "prepared" / "v1").mkdir(parents=True)
        (folder / "prepared" / "v1" / "manifest.json").write_text(f'{{"inputs": ["{folder}/data/train.jsonl.gz"]}}')
        (folder / "gate.json").write_text("{}")
        if checkpoint:
            (folder / "checkpoints" / f"ckpt-{name}.weights.h5").write_text(name)
    assert serve.continue_from_shorter(tmp_path, "tiny", 400) == tmp_path / "real-text-tiny-200"
    copy = tmp_path / "real-text-tiny-400"
    assert (copy / "checkpoints" / "ckpt-tiny-200.weights.h5").read_text() == "tiny-200"
    assert not (copy / "gate.json").exists()
    assert (copy / "prepared" / "v1" / "manifest.json").read_text() == f'{{"inputs": ["{copy}/data/train.jsonl.gz"]}}'
    assert serve.continue_from_shorter(tmp_path, "tiny", 400) is None  # there already
    assert serve.continue_from_shorter(tmp_path, "tiny", 50) is None  # nothing shorter
