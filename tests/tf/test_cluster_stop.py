"""Two localhost workers through `keras-transformer train` stop at the same step, even when
their own stop decisions differ: the chief decides, every worker follows.

A worker that left the training loop while another waits in the next gradient all-reduce
hangs the cluster or ends it with TensorFlow's "CollectiveReduceV2 ... Restart your program"
error (issue 45). The race is made certain here: each worker program (this file, run as a
script) is the command line's `main` with one worker's decision changed in advance:

- time limit: the chief's clock runs an hour ahead, so its `training.max_minutes` (10) is
  over at the first step while the other worker's is not;
- early stopping: the other worker's validations never improve (it would stop at its
  second validation), the chief's always do.

Both workers must end at the same step (the chief's decision), exit 0, and the launcher kills
both and fails after `TIMEOUT_S` rather than hang. A worker whose prepared data differs from the
chief's (its digest changed in advance) makes both fail before the first step, saying so.
"""

import json
import os
import sys

from test_multi_worker import launch_workers

TIMEOUT_S = 90  # a hang guard: each test takes 35-50 s on this busy 2-core machine
MAX_STEPS = 6


def worker(record, case, *argv):
    from trained_batches import record_trained_batches

    from keras_transformer import cli, data
    from keras_transformer.decoding import evaluation
    from keras_transformer.run import train as run_train

    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    record_trained_batches(lambda source, labels: open(record, "a").write("step\n"))
    if case == "time_limit" and index == 0:
        base_init = run_train._TimeLimit.__init__

        def hour_ahead(self, minutes):
            base_init(self, minutes)
            self.deadline -= 3600  # as if this clock ran an hour ahead of the other worker's

        run_train._TimeLimit.__init__ = hour_ahead
    if case == "other_manifest" and index == 1:
        from keras_transformer.data import manifest

        manifest.content_sha256 = lambda manifest: "another prepared directory"
    if case == "early_stopping":
        # Fast: no search (the translations are the sources), no validation loss at the epoch's end.
        run_train.translate_texts = lambda model, tokenizer, texts, *args, **kwargs: list(texts)
        data.make_dataset = lambda *args, **kwargs: None
        calls = []

        def scores(hypotheses, references):  # the chief's always improve, the other's never
            calls.append(None)
            value = 10.0 + len(calls) if index == 0 else 10.0
            return {"bleu": value, "chrf": value}

        evaluation.corpus_scores = scores
    sys.exit(cli.main(list(argv)))


def run_case(tmp_path, case, training, valid=False, returncodes=None):
    from test_prepare import write_corpus

    corpus = write_corpus(tmp_path / "corpus.tsv", 60)
    extra = ""
    if valid:
        extra = f", valid: {write_corpus(tmp_path / 'valid.tsv', 8, seed=1)}"
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""output_dir: {tmp_path / 'run'}
model: {{preset: tiny, d_model: 16, d_ff: 32, num_heads: 2, num_encoder_layers: 1, num_decoder_layers: 1}}
data: {{train: {corpus}{extra}, vocabulary_size: 60, max_length: 40, bucket_width: 8}}
training: {{tokens_per_batch: 120, epochs: 1000, max_steps: {MAX_STEPS}, save_every_steps: 100, average_last: 1,
           warmup_steps: 10, {training}}}
""")
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    os.environ["TMPDIR"] = str(private_tmp)  # the non-chief's private directory goes here
    try:
        outputs = launch_workers(tmp_path, [os.path.abspath(__file__), str(tmp_path / "steps{}.txt"), case,
                                            "train", "--config", str(config)], timeout_s=TIMEOUT_S,
                                 returncodes=returncodes)
    finally:
        del os.environ["TMPDIR"]
    steps = [len((tmp_path / f"steps{index}.txt").read_text().split()) if (tmp_path / f"steps{index}.txt").exists()
             else 0 for index in range(2)]
    return steps, outputs


def test_the_chiefs_time_limit_stops_every_worker_at_its_step(tmp_path):
    steps, outputs = run_case(tmp_path, "time_limit", "max_minutes: 10")
    assert steps == [1, 1], steps
    assert "time limit" in outputs[0]


def test_the_chiefs_validation_verdict_is_every_workers(tmp_path):
    steps, outputs = run_case(tmp_path, "early_stopping", "validate_every_steps: 2, early_stopping_patience: 1, "
                              "validation_sentences: 4", valid=True)
    assert steps == [MAX_STEPS, MAX_STEPS], steps
    assert "early stop" in outputs[1] and "early stop" not in outputs[0]


def test_a_worker_with_other_prepared_data_is_refused_before_the_first_step(tmp_path):
    codes = []
    steps, outputs = run_case(tmp_path, "other_manifest", "max_minutes: 10", returncodes=codes)
    assert codes == [2, 2] and steps == [0, 0], (codes, outputs)  # 2: the command line's error exit
    for output in outputs:
        assert "the workers do not train the same run: prepared data: 1 worker(s) differ from the chief." in output
        assert "batch plan:" not in output and "start step:" not in output
    assert "This worker (1) differs in: prepared data." in outputs[1]


if __name__ == "__main__":
    worker(sys.argv[1].format(json.loads(os.environ["TF_CONFIG"])["task"]["index"]), *sys.argv[2:])
