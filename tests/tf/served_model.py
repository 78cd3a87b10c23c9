"""The small model that the warm-up and XLA-shortlist tests export, and their served children:
a process that loads the export as TF Serving does (benchmarks/serve_mix.py's SessionServer)
with XLA's module dump on, so a child can count the programs compiled at each point."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

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


def run_served_child(script, work, export_dir, argument):
    """Runs CHILD_PRELUDE + `script` in a fresh process with XLA's dump in `work`/dump; the JSON it
    prints last."""
    path, dump = Path(work) / "child.py", Path(work) / "dump"
    path.write_text(CHILD_PRELUDE + script)
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", XLA_FLAGS=f"--xla_dump_to={dump}")
    completed = subprocess.run([sys.executable, str(path), str(export_dir), str(dump), str(ROOT), str(argument)],
                               env=environment, capture_output=True, text=True, timeout=400)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])
