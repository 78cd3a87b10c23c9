"""Fine-tuning a trained run on a second domain (`train --init-from`)."""

import json

import pytest

from keras_transformer import cli, runs
from keras_transformer.data import SubwordTokenizer
from keras_transformer.datasets.synthetic_en_de import make_splits, write_jsonl

MODEL = "{preset: tiny, d_model: 64, d_ff: 256, num_heads: 4, num_encoder_layers: 2, num_decoder_layers: 2}"


def write_config(path, output_dir, train, test, steps, warmup=150):
    path.write_text(
        f"""output_dir: {output_dir}
model: {MODEL}
data: {{train: {train}, test: {test}, source_key: en, target_key: de, vocabulary_size: 300, max_length: 48}}
training: {{tokens_per_batch: 2048, epochs: 50, max_steps: {steps}, warmup_steps: {warmup},
           save_every_steps: 1000, average_last: 1}}
decoding: {{beam_size: 1, max_extra_length: 10}}
"""
    )
    return path


@pytest.fixture(scope="module")
def domains(tmp_path_factory):
    """A run trained on domain A (numbers, dates), and domain B's (modal verbs, perfect tense) files."""
    work = tmp_path_factory.mktemp("finetune")
    for name, categories in (("a", ("numbers", "dates")), ("b", ("modal_verbs", "perfect_tense"))):
        train, test = make_splits(3000, 60, seed=2, categories=categories)
        write_jsonl(work / f"{name}-train.jsonl.gz", train)
        write_jsonl(work / f"{name}-test.jsonl.gz", test)
    config = write_config(work / "a.yaml", work / "run-a", work / "a-train.jsonl.gz", work / "a-test.jsonl.gz", 400)
    assert cli.main(["train", "--config", str(config)]) == 0
    return work


def bleu_on_b(work, run):
    result, _ = runs.evaluate(run, corpus=str(work / "b-test.jsonl.gz"), progress=False)
    return result["bleu"]


def test_fine_tuning_on_a_second_domain_raises_its_bleu(domains):
    work = domains
    before = bleu_on_b(work, work / "run-a")
    config = write_config(work / "b.yaml", work / "run-b", work / "b-train.jsonl.gz", work / "b-test.jsonl.gz",
                          250, warmup=50)
    assert cli.main(["train", "--config", str(config), "--init-from", str(work / "run-a")]) == 0
    # The run-a tokenizer came along, byte for byte.
    assert (work / "run-b" / "tokenizer.model").read_bytes() == (work / "run-a" / "tokenizer.model").read_bytes()
    assert json.loads((work / "run-b" / "config.json").read_text())["training"]["init_from"] == str(work / "run-a")
    after = bleu_on_b(work, work / "run-b")
    print(f"domain B BLEU: {before:.1f} before fine-tuning, {after:.1f} after")
    assert after > before + 10


def test_init_from_refuses_a_different_tokenizer_or_model(domains, tmp_path):
    work = domains
    # The run directory already has another tokenizer: both files are named.
    config = write_config(tmp_path / "c.yaml", tmp_path / "run-c", work / "b-train.jsonl.gz",
                          work / "b-test.jsonl.gz", 2)
    (tmp_path / "run-c").mkdir()
    SubwordTokenizer.train(["ein Apfel", "two apples", "drei Häuser"], vocabulary_size=30,
                           hard_vocab_limit=False).save(str(tmp_path / "run-c" / "tokenizer.model"))
    with pytest.raises(runs.RunError, match=r"tokenizer mismatch: .*run-c/tokenizer.model differs from "
                                            r".*run-a/tokenizer.model"):
        runs.train(runs.config_lib.resolve([config], assignments=[f"training.init_from={work / 'run-a'}"]))
    # Another architecture: the differing keys are named.
    config = write_config(tmp_path / "d.yaml", tmp_path / "run-d", work / "b-train.jsonl.gz",
                          work / "b-test.jsonl.gz", 2)
    with pytest.raises(runs.RunError, match=r"d_model 32 here, 64 in .*model.keras"):
        runs.train(runs.config_lib.resolve(
            [config], assignments=[f"training.init_from={work / 'run-a'}", "model.d_model=32"]))
    with pytest.raises(runs.RunError, match="no model at"):
        runs.train(runs.config_lib.resolve([config], assignments=[f"training.init_from={tmp_path}"]))
