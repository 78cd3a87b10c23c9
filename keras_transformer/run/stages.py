"""Resumable stages of a multi-stage recipe (back-translation, fine-tuning).

A stage (split the data, train a model, translate a corpus, score a model)
writes its outputs, then a record: a JSON file holding the settings it ran
with and what it produced. A rerun of the recipe skips every stage whose
record exists with the same settings, so an interrupted recipe picks up at
the stage it was in (a training stage then resumes from its checkpoints). A
record whose settings differ from this run's stops the recipe with an error
naming the file and the settings: silently reusing it would compare results
made under other settings, silently redoing it would discard them.
"""

import json
import os
import time
from pathlib import Path


class StageError(RuntimeError):
    """A stage's record on disk does not fit this run; the message names the file."""


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        flat = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): value}


def _differences(then, now, limit=4):
    old, new = _flatten(then), _flatten(now)
    keys = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
    shown = [f"{key}: {old.get(key)!r} then, {new.get(key)!r} now" for key in keys[:limit]]
    return "; ".join(shown) + (f"; and {len(keys) - limit} more" if len(keys) > limit else "")


def _normalised(settings):
    """Settings as they read back from JSON (tuples become lists, paths strings)."""
    return json.loads(json.dumps(settings, default=str))


def finished(record_path, settings):
    """The stage's record (a dict) when it finished with these `settings`;
    None when it has not finished; StageError when it finished with others."""
    record_path = Path(record_path)
    if not record_path.is_file():
        return None
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise StageError(f"{record_path}: unreadable stage record ({error}); delete it to redo the stage.") from None
    if not isinstance(record, dict) or "settings" not in record:
        raise StageError(f"{record_path}: not a stage record (no 'settings'); delete it to redo the stage.")
    settings = _normalised(settings)
    if record["settings"] != settings:
        raise StageError(
            f"{record_path}: this stage finished with other settings ({_differences(record['settings'], settings)}). "
            f"Delete {record_path.parent} to redo it with the new ones, or use another --output-dir."
        )
    return record


def mark_finished(record_path, settings, **results):
    """Writes the stage's record (whole or not at all); returns it."""
    record_path = Path(record_path)
    record = {"settings": _normalised(settings), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              **_normalised(results)}
    record_path.parent.mkdir(parents=True, exist_ok=True)
    temporary = record_path.with_name(record_path.name + ".tmp")
    temporary.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(temporary, record_path)
    return record


def file_digest(path):
    """SHA-256 of a file: ties a later stage to the exact model an earlier one produced."""
    from keras_transformer.data.shards import file_sha256

    return file_sha256(path)


def train_stage(label, config, inputs=None, callbacks=()):
    """`run.train.train(config)` into config["output_dir"], unless its record
    (RUN/stage.json) says it finished with this configuration and these
    `inputs` (digests of the files an earlier stage made: a redone earlier
    stage must not leave a model trained on its old output looking finished);
    returns the run directory. An unfinished run resumes from its checkpoints."""
    from keras_transformer.run.train import train

    run_dir = Path(config["output_dir"])
    record_path = run_dir / "stage.json"
    settings = {"config": config, "inputs": inputs or {}}
    if finished(record_path, settings) is not None:
        print(f"{label}: finished before, skipping ({record_path})", flush=True)
        return run_dir
    start = time.time()
    train(config, callbacks=callbacks)
    mark_finished(record_path, settings, seconds=round(time.time() - start, 1))
    print(f"{label}: trained in {time.time() - start:.0f}s -> {run_dir}", flush=True)
    return run_dir


def score_stage(label, run_dir, corpus, record_path, decoding=None):
    """Scores the model of `run_dir` on the JSON-lines or TSV `corpus` with
    `run.trained.evaluate` (the run's decoding settings, `decoding` overriding some),
    unless `record_path` holds a score of this very model file with these
    settings. Returns the result (sentences, bleu, chrf, exact_match, ...);
    the record holds it too. The run's own eval.json is left alone."""
    from keras_transformer.run.data import MODEL_FILE
    from keras_transformer.run.trained import evaluate

    run_dir = Path(run_dir)
    model_path = run_dir / MODEL_FILE
    if not model_path.is_file():
        raise StageError(f"{model_path}: no trained model to score.")
    settings = {"model": str(model_path.resolve()), "model_sha256": file_digest(model_path),
                "corpus": str(Path(corpus).resolve()), "corpus_sha256": file_digest(corpus), "decoding": decoding or {}}
    record = finished(record_path, settings)
    if record is not None:
        print(f"{label}: scored before, BLEU {record['result']['bleu']:.1f}, chrF {record['result']['chrf']:.1f} "
              f"({record_path})", flush=True)
        return record["result"]
    record_path = Path(record_path)
    record_path.parent.mkdir(parents=True, exist_ok=True)
    partial = record_path.with_name(record_path.name + ".eval.tmp")
    result, _ = evaluate(run_dir, corpus=str(corpus), progress=False, decoding=decoding, result_path=partial)
    mark_finished(record_path, settings, result=result)
    partial.unlink()
    print(f"{label}: {result['sentences']} sentences, BLEU {result['bleu']:.1f}, chrF {result['chrf']:.1f} "
          f"-> {record_path}", flush=True)
    return result
