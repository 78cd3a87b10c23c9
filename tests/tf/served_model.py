"""The small model that the warm-up and XLA-shortlist tests export, and their served children:
a process that loads the export as TF Serving does (benchmarks/serve_mix.py's SessionServer)
with XLA's module dump on, so a child can count the programs compiled at each point."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# TF's persistent XLA cache, set in TF_XLA_FLAGS (docs/serving.md gives it for tensorflow_model_server).
XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory"

SENTENCES = [
    ("The small cat sees a dog.", "Die kleine Katze sieht einen Hund."),
    ("The big dog runs quickly.", "Der große Hund läuft schnell."),
    ("A red house is old.", "Ein rotes Haus ist alt."),
    ("The woman reads a book.", "Die Frau liest ein Buch."),
    ("The children play in the garden.", "Die Kinder spielen im Garten."),
]


def train_tokenizer(directory):
    """A 400-piece tokenizer of SENTENCES, saved in `directory` and loaded back (as an export reads it)."""
    from keras_transformer.data import SubwordTokenizer

    tokenizer = SubwordTokenizer.train(SENTENCES * 4, 400, byte_fallback=True, hard_vocab_limit=False, seed=1)
    return SubwordTokenizer.load(tokenizer.save(Path(directory) / "spm.model"))


def build_model(vocabulary_size):
    """A one-layer Transformer of width 16, seeded: untrained, but the same weights every run."""
    import keras

    import keras_transformer as kt

    keras.utils.set_random_seed(3)
    model = kt.Transformer(vocabulary_size=vocabulary_size, d_model=16, num_heads=2, d_ff=32,
                           num_encoder_layers=1, num_decoder_layers=1, dropout=0.0)
    model.build()
    return model


def xla_programs(dump_dir):
    """The number of XLA programs compiled so far into `dump_dir` (`--xla_dump_to`)."""
    if not os.path.isdir(dump_dir):
        return 0
    return len({name.split(".")[0] for name in os.listdir(dump_dir) if name.startswith("module_")})


# A child script starts with this: its argv is (export_dir, dump_dir, ROOT, argument).
CHILD_PRELUDE = r'''
import json, os, sys
sys.path[:0] = [sys.argv[3], os.path.join(sys.argv[3], "tests", "tf")]
from served_model import xla_programs
export_dir, dump_dir, argument = sys.argv[1], sys.argv[2], sys.argv[4]
def programs():
    return xla_programs(dump_dir)
'''


def run_served_child(script, work, export_dir, argument, **environment):
    """Runs CHILD_PRELUDE + `script` in a fresh process with XLA's dump in `work`/dump (and the
    `environment` variables given); the JSON it prints last."""
    path, dump = Path(work) / "child.py", Path(work) / "dump"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CHILD_PRELUDE + script)
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", XLA_FLAGS=f"--xla_dump_to={dump}", **environment)
    completed = subprocess.run([sys.executable, str(path), str(export_dir), str(dump), str(ROOT), str(argument)],
                               env=environment, capture_output=True, text=True, timeout=400)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def batching_parameters_class():
    """`tensorflow.serving.BatchingParameters`, built here from its definition: tensorflow-serving-api does not
    ship `session_bundle_config_pb2`. Field names, numbers and types as in TF Serving 2.20.0's
    tensorflow_serving/servables/tensorflow/session_bundle_config.proto (message BatchingParameters)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    wrappers = descriptor_pb2.FileDescriptorProto()
    wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
    pool.Add(wrappers)
    file = descriptor_pb2.FileDescriptorProto(name="session_bundle_config.proto", package="tensorflow.serving",
                                              syntax="proto3", dependency=["google/protobuf/wrappers.proto"])
    message = file.message_type.add(name="BatchingParameters")
    field = descriptor_pb2.FieldDescriptorProto
    for name, number, wrapper in (("max_batch_size", 1, "Int64Value"), ("batch_timeout_micros", 2, "Int64Value"),
                                  ("max_enqueued_batches", 3, "Int64Value"), ("num_batch_threads", 4, "Int64Value"),
                                  ("thread_pool_name", 5, "StringValue"),
                                  ("enable_large_batch_splitting", 8, "BoolValue"),
                                  ("max_execution_batch_size", 9, "Int64Value")):
        message.field.add(name=name, number=number, label=field.LABEL_OPTIONAL, type=field.TYPE_MESSAGE,
                          type_name=f".google.protobuf.{wrapper}")
    message.field.add(name="allowed_batch_sizes", number=6, label=field.LABEL_REPEATED, type=field.TYPE_INT64)
    message.field.add(name="pad_variable_length_inputs", number=7, label=field.LABEL_OPTIONAL, type=field.TYPE_BOOL)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))
