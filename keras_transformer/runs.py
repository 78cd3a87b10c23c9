"""Deprecated: a run's API moved to the package `keras_transformer.run`, a module per concept.

Importing this path warns (DeprecationWarning) and gives the names it gave
before, the very objects of their new modules: `train`, `build_model`,
`compile_model`, `run_boundaries`, `CHECKPOINT_DIR` (`run.train`); the
run's files, `RunError`, `prepare`, `read_pairs`, `bucket_boundaries`
(`run.data`); `make_translator`, `translate_texts`, `with_target_language`
(`run.translate`); `load_run`, `evaluate`, `export`, ... (`run.trained`).
Monkeypatching a name here changes nothing there: patch the module that
defines it. Goes in the next release.
"""

from keras_transformer import config as config_lib  # noqa: F401  (was importable from here)
from keras_transformer._moved import warn_moved
from keras_transformer.run.data import (  # noqa: F401
    CONFIG_FILE,
    MARIAN_TOKENIZER_DIR,
    MODEL_FILE,
    TOKENIZER_FILE,
    RunError,
    bucket_boundaries,
    prepare,
    prepared_dir,
    read_pairs,
)
from keras_transformer.run.train import (  # noqa: F401
    CHECKPOINT_DIR,
    build_model,
    compile_model,
    run_boundaries,
    train,
)
from keras_transformer.run.trained import (  # noqa: F401
    evaluate,
    export,
    export_ctranslate2,
    load_model,
    load_run,
    load_tokenizer,
    validation_perplexity,
)
from keras_transformer.run.translate import make_translator, translate_texts, with_target_language  # noqa: F401
from keras_transformer.training.progress import read_best  # noqa: F401

_read_pairs = read_pairs  # the name benchmarks/ scripts imported

warn_moved(__name__, "keras_transformer.run (train: run.train, files and data: run.data, translating: "
                     "run.translate, load, evaluate and export: run.trained)")
