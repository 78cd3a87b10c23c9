"""A finished run's vocabulary shortlist, built from its training corpus.

`keras-transformer shortlist RUN` writes `RUN/shortlist.txt` (the format of
`keras_transformer.decoding.shortlist`); `translate --shortlist` and
`export --shortlist` read it.
"""

from pathlib import Path

SHORTLIST_FILE = "shortlist.txt"


def training_id_pairs(tokenizer, pairs, chunk=2000):
    """(source ids, target ids) of text pairs, tokenized `chunk` pairs at a time."""
    for start in range(0, len(pairs), chunk):
        part = pairs[start : start + chunk]
        sources = tokenizer.tokenize([s for s, _ in part])
        targets = getattr(tokenizer, "tokenize_target", tokenizer.tokenize)([t for _, t in part])
        sources = sources.to_list() if hasattr(sources, "to_list") else sources
        targets = targets.to_list() if hasattr(targets, "to_list") else targets
        yield from zip(sources, targets)


def build_run_shortlist(output_dir, path=None, per_source=50, frequent=100, min_count=1):
    """Builds the shortlist of the run in `output_dir` from its data.train
    corpus and saves it to `path` (default RUN/shortlist.txt); returns
    (shortlist, path)."""
    from keras_transformer.decoding.shortlist import Shortlist
    from keras_transformer.run.data import read_pairs
    from keras_transformer.run.trained import load_run

    model, tokenizer, config = load_run(output_dir)
    pairs = read_pairs(config, "train")
    source_size = getattr(model, "source_vocabulary_size", None) or model.vocabulary_size
    shortlist = Shortlist.build(training_id_pairs(tokenizer, pairs), source_size, model.vocabulary_size,
                                per_source=per_source, frequent=frequent, min_count=min_count)
    path = Path(path) if path else Path(output_dir) / SHORTLIST_FILE
    shortlist.save(path)
    return shortlist, path
