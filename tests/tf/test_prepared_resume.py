"""A run killed mid-epoch and resumed trains on the batches an uninterrupted
run trains on, from the checkpointed step on, without replaying any.

`run.train.train` runs in subprocesses (tests/tf/conftest.py's harness). Each
records a digest of every batch its train step receives (inside the
compiled step, so prefetched batches that were never trained on do not
count). The run is killed after step 7 (checkpoints every 3 steps): the
resumed run must train the uninterrupted run's batches 7-12 (step 7 again,
since the kill came before its checkpoint), across an epoch boundary, and
end with the same weights. Before that resume, one with another
`training.tokens_per_batch` is refused, naming it, and changes nothing.
"""

import os
import re
import signal
import sys

import numpy as np
import pytest

STEPS, KILL_AFTER, SAVE_EVERY = 12, 7, 3


def child(corpus, output_dir, kill_after, record, tokens_per_batch=100):
    import hashlib

    import keras
    import tensorflow as tf
    from trained_batches import record_trained_batches

    from keras_transformer import config as config_lib
    from keras_transformer.run import train as run_train, trained as run_trained

    tf.config.experimental.enable_op_determinism()
    kill_after = int(kill_after)

    def write_digest(source, labels):
        with open(record, "a") as handle:
            handle.write(hashlib.sha1(source.tobytes() + labels.tobytes()).hexdigest() + "\n")

    record_trained_batches(write_digest)

    class Kill(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)

    assignments = [
        f"output_dir={output_dir}", f"data.train={corpus}", "data.vocabulary_size=120", "data.max_length=24",
        "data.pairs_per_shard=50", "model.d_model=16", "model.d_ff=32", "model.num_heads=2",
        "model.num_encoder_layers=1", "model.num_decoder_layers=1", f"training.tokens_per_batch={tokens_per_batch}",
        "data.bucket_width=8",
        f"training.max_steps={STEPS}", f"training.save_every_steps={SAVE_EVERY}", "training.average_last=1",
        "training.warmup_steps=4",
    ]
    model_path = run_train.train(config_lib.resolve([], None, assignments), callbacks=[Kill()])
    model = run_trained.load_model(model_path)
    np.savez(os.path.join(output_dir, "final.npz"), *model.get_weights())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from test_prepare import write_corpus

    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.tsv", 120)


def digests(path):
    return open(path).read().split()


def test_a_killed_run_resumes_with_the_batches_it_would_have_seen(tmp_path, corpus, start_child, finish_child,
                                                                  saved_weights):
    reference_dir, run_dir = tmp_path / "reference", tmp_path / "run"
    reference = start_child(__file__, corpus, reference_dir, 0, tmp_path / "reference.txt")
    finish_child(start_child(__file__, corpus, run_dir, KILL_AFTER, tmp_path / "killed.txt"), -signal.SIGKILL)
    refused = finish_child(start_child(__file__, corpus, run_dir, 0, tmp_path / "refused.txt", 150), 1)
    assert "training.tokens_per_batch: 100 then, 150 now" in refused, refused[-3000:]
    assert not (tmp_path / "refused.txt").exists()
    finish_child(start_child(__file__, corpus, run_dir, 0, tmp_path / "resumed.txt"))
    output = finish_child(reference)
    # The kill and the resume straddle an epoch boundary (else the crossing would go untested).
    steps_per_epoch = int(re.search(r"(\d+) steps per epoch", output).group(1))
    assert KILL_AFTER < steps_per_epoch < STEPS
    expected = digests(tmp_path / "reference.txt")
    assert len(expected) == STEPS and len(set(expected)) == STEPS
    assert digests(tmp_path / "killed.txt") == expected[:KILL_AFTER]
    resumed_from = KILL_AFTER // SAVE_EVERY * SAVE_EVERY
    assert digests(tmp_path / "resumed.txt") == expected[resumed_from:]
    for mine, theirs in zip(saved_weights(run_dir / "final.npz"), saved_weights(reference_dir / "final.npz"),
                            strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    child(*sys.argv[1:])
