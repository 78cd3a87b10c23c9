"""`keras-transformer train` on two localhost workers: the command and
configuration of one host, with TF_CONFIG naming the cluster.

Each worker is the command line's `main` with its train step wrapped to
record the rows (source and labels, without padding) of every batch it
trains on. One epoch over 150 pairs: the two workers together must train on
every pair that fits data.max_length exactly once, neither reads the
other's pairs, only the chief leaves files (in output_dir) and the other's
private directory is gone.

This file is also the worker program (run as a script).
"""

import json
import os
import sys

from test_multi_worker import launch_workers


def worker(record, *argv):
    from trained_batches import record_trained_batches

    from keras_transformer import cli
    from keras_transformer.data.special_tokens import PAD_ID

    def write_rows(source, labels):
        with open(record, "a") as handle:
            for s, y in zip(source.tolist(), labels.tolist()):
                handle.write(json.dumps([[t for t in s if t != PAD_ID], [t for t in y if t != PAD_ID]]) + "\n")

    record_trained_batches(write_rows)
    sys.exit(cli.main(list(argv)))


def test_two_workers_train_every_pair_once_per_epoch(tmp_path):
    from test_prepare import write_corpus

    from keras_transformer.data.prepare import current_version, read_manifest
    from keras_transformer.data.shards import ShardSet
    from keras_transformer.data.special_tokens import EOS_ID

    corpus = write_corpus(tmp_path / "corpus.tsv", 150)
    run = tmp_path / "run"
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""output_dir: {run}
model: {{preset: tiny, d_model: 16, d_ff: 32, num_heads: 2, num_encoder_layers: 1, num_decoder_layers: 1}}
data: {{train: {corpus}, vocabulary_size: 100, max_length: 40, bucket_width: 8}}
training: {{tokens_per_batch: 200, epochs: 1, save_every_steps: 4, average_last: 1, warmup_steps: 10}}
""")
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    os.environ["TMPDIR"] = str(private_tmp)  # the workers' private directories go here
    try:
        outputs = launch_workers(tmp_path, [os.path.abspath(__file__), str(tmp_path / "rows{}.jsonl"), "train",
                                            "--config", str(config)], timeout_s=400)
    finally:
        del os.environ["TMPDIR"]
    assert "worker 0 of 2 (chief)" in outputs[0] and "worker 1 of 2," in outputs[1]
    rows = []
    for index in range(2):
        with open(tmp_path / f"rows{index}.jsonl") as handle:
            rows.append([tuple(map(tuple, json.loads(line))) for line in handle])
    manifest = read_manifest(run / "prepared")
    shards = ShardSet(current_version(run / "prepared"), manifest["shards"], manifest["token_dtype"])
    expected = sorted((tuple(s + [EOS_ID]), tuple(t + [EOS_ID])) for s, t in shards.pairs(range(shards.num_pairs))
                      if max(len(s), len(t)) + 1 <= 40)
    assert len(expected) > 100
    assert rows[0] and rows[1] and not set(rows[0]) & set(rows[1])
    assert sorted(rows[0] + rows[1]) == expected
    assert (run / "model.keras").is_file() and list((run / "checkpoints").glob("ckpt-*.weights.h5"))
    assert os.listdir(private_tmp) == []


if __name__ == "__main__":
    worker(sys.argv[1].format(json.loads(os.environ["TF_CONFIG"])["task"]["index"]), *sys.argv[2:])
