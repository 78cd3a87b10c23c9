"""A run on disk: train, resume, evaluate, translate and export from a configuration.

A run is a directory, `output_dir` of its configuration (`keras_transformer.config`):

    config.json          the resolved configuration
    tokenizer.model      the joint SentencePiece vocabulary
    marian_tokenizer/    instead of tokenizer.model, an imported Marian model's
                         tokenizer (source.spm, target.spm, vocab.json; see
                         `keras-transformer import`, keras_transformer.marian.run_import)
    prepared/            the prepared training corpus (data.prepared_dir by default; see data/prepare.py)
    checkpoints/         ckpt-<step>.weights.h5 (weights + optimizer state), latest.json, plan.json
    tensorboard/         training curves
    progress.jsonl       the progress records (training.progress)
    model.keras          the final model (average of the last checkpoints, or the best validated one)
    eval.json            the last `evaluate` result
    shortlist.txt        the vocabulary shortlist (`keras-transformer shortlist`)
    export/              SavedModel, CTranslate2, MarianMT and KerasHub exports

Running `train` again on the same `output_dir` resumes from the newest
checkpoint; nothing already done is lost. TensorFlow-specific (tf.data, the
tokenizer): used by the command line and the recipes.

One module per concept; import each name from its module (this package's
`__init__` imports none of them):

- `run.train`: configure and train (`train`, `build_model`, `compile_model`,
  fine-tuning with `training.init_from`);
- `run.data`: the run's files and errors (`RunError`, `CONFIG_FILE`, ...),
  its corpora (`read_pairs`), the prepared data and batch plan (`prepare`,
  `training_batches`, `check_plan`) and batch lengths (`bucket_boundaries`);
- `run.workers`: one `train` command on a cluster of workers (TF_CONFIG);
- `run.translate`: strings in, strings out with the run's decoding settings
  (`make_translator`, `translate_texts`);
- `run.trained`: a finished run: `load_run`, `evaluate`,
  `validation_perplexity`, `export` (SavedModel), `export_ctranslate2`;
- `run.shortlist`: the run's vocabulary shortlist;
- `run.stages`: resumable stages of a multi-stage recipe (`train_stage`,
  `score_stage`);
- `run.plots`: a run's pictures (`keras-transformer plot` and `attention`):
  its training curves from `progress.jsonl`, its model's encoder-decoder
  attention.

The layering is one way (tests/test_import_graph.py): `data` and `workers`
import no other module of the run, `translate` only `data`, `trained` those
two, and `train`, `shortlist` and `stages` sit on top; `plots` imports none
of them. The Marian bridges (`keras-transformer import`, `export --format
marian-hf`) read and write run directories too but live in
`keras_transformer.marian` with the rest of what knows Marian's formats.

The top-level modules that held these before (`keras_transformer.runs`,
`run_data`, `run_workers`, `run_translation`, `run_shortlist`,
`trained_run`, `stages`, and `plots`) still import, with a
DeprecationWarning, for one release.
"""
