"""What a user sees while a run trains: progress inside an epoch, and
validation BLEU with early stopping and the best model kept.

`TrainingProgress` reports step, epoch, loss, target tokens/s (non-pad),
learning rate and the time left in the budget: a live line on a terminal,
a line every `every_steps` steps or `every_seconds` seconds in logs, and
the same figures as JSON lines in `progress.jsonl` (what `plot` draws) and
in Keras' logs (what the TensorBoard callback writes, when it comes after).

`ValidationTranslation` translates a fixed validation subset every
`every_steps` steps, scores it with sacreBLEU and chrF, keeps the best
weights (`best-<step>.weights.h5`, then `best.json` naming it, each written
under a temporary name and renamed, so a kill at any point leaves a record
that names complete weights; the class says how a run resumes), and stops
training after `patience` validations without an improvement of at least
`min_delta`.
"""

import json
import os
import sys
import time

import keras

from keras_transformer.data.corpus import append_jsonl

PROGRESS_FILE = "progress.jsonl"
BEST_RECORD_FILE = "best.json"


def read_records(path):
    """The JSON lines of `path` (a torn last line, from a kill, is skipped)."""
    records = []
    if not os.path.isfile(path):
        return records
    with open(path, encoding="utf-8") as stream:
        for line in stream:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def _step(model):
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


class _CountsRunSteps:
    """Steps as the run's `StepCheckpoint` counts them (the steps of its file
    names and of `max_steps`), when `fit_resumable` gave it one as
    `checkpoint`; else the optimizer's iteration count. The two differ when
    the optimizer state, with its count, came from another run
    (`training.init_optimizer: keep`)."""

    checkpoint = None

    def _run_step(self):
        return self.checkpoint.step if self.checkpoint is not None else _step(self.model)


def _learning_rate(model):
    try:
        return float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))
    except (TypeError, ValueError):
        return None


class TrainingProgress(_CountsRunSteps, keras.callbacks.Callback):
    """Progress lines and records inside an epoch (see the module docstring).

    Args:
        output_dir: where `progress.jsonl` goes (None: no records).
        every_steps, every_seconds: a log line (and record) after this many
            steps or seconds, whichever comes first.
        deadline: `time.monotonic()` value at which the budget ends (None).
        live: rewrite one line in place (default: when the stream is a terminal).
        stream: where lines go (default: stdout).
        steps_per_epoch: for the epoch column.
    """

    def __init__(self, output_dir=None, every_steps=100, every_seconds=60.0, deadline=None, live=None,
                 stream=None, steps_per_epoch=None):
        super().__init__()
        self.path = None if output_dir is None else os.path.join(os.fspath(output_dir), PROGRESS_FILE)
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.deadline = deadline
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.steps_per_epoch = steps_per_epoch

    def on_train_begin(self, logs=None):
        self.last_time = self.last_line = time.monotonic()
        self.last_step = None
        self.last_logs = None
        # Target tokens since training began, at the last report. The token
        # metric restarts each epoch, so the run's count is the finished
        # epochs' totals plus the current epoch's metric: an interval that
        # crosses an epoch's end counts the tokens on both sides of it.
        self.tokens_at_last = 0.0
        self.tokens_before_epoch = 0.0
        self.epoch_tokens = 0.0
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.tokens_before_epoch += self.epoch_tokens
        self.epoch_tokens = 0.0

    def on_train_batch_end(self, batch, logs=None):
        logs = logs if logs is not None else {}
        self.epoch_tokens = float(logs.get("target_tokens", self.epoch_tokens))
        self._maybe_report(logs)

    def on_train_end(self, logs=None):
        # The last step is always reported, however short the run.
        if self.last_step is not None and self.last_logs is not None and self._run_step() > self.last_step:
            self._maybe_report(self.last_logs, force=True)
        if self.live:
            self.stream.write("\n")

    def _maybe_report(self, logs, force=False):
        self.last_logs = logs
        step = self._run_step()
        if self.last_step is None:
            self.last_step = step - 1
        now = time.monotonic()
        due = force or step - self.last_step >= self.every_steps or now - self.last_time >= self.every_seconds
        if not (due or (self.live and now - self.last_line >= 0.5)):
            return
        tokens = self.tokens_before_epoch + self.epoch_tokens if "target_tokens" in logs else 0.0
        seconds = max(now - self.last_time, 1e-9)
        figures = {
            "step": step,
            "epoch": self.epoch + 1,
            "loss": float(logs["loss"]) if "loss" in logs else None,
            "tokens_per_second": (tokens - self.tokens_at_last) / seconds if tokens else None,
            "learning_rate": _learning_rate(self.model),
            "minutes_left": None if self.deadline is None else max(self.deadline - now, 0.0) / 60,
        }
        self.last_line = now
        if self.live:
            self.stream.write("\r" + self._format(figures) + " " * 4)
            self.stream.flush()
        if not due:
            return
        # Rates over the interval since the last report.
        self.last_time, self.last_step, self.tokens_at_last = now, step, tokens
        for key in ("tokens_per_second", "learning_rate"):
            if figures[key] is not None:
                logs[key] = figures[key]
        if not self.live:
            print(self._format(figures), file=self.stream, flush=True)
        if self.path:
            append_jsonl(self.path, {"time": time.time(), **figures})

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        record = {"time": time.time(), "step": self._run_step(), "epoch": epoch + 1}
        record.update({key: float(value) for key, value in logs.items() if key.startswith("val_")})
        if len(record) > 3:
            if self.live:
                self.stream.write("\n")  # below the live line
            print("  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()
                            if k != "time"), file=self.stream, flush=True)
            if self.path:
                append_jsonl(self.path, record)

    def _format(self, figures):
        epoch = f"epoch {figures['epoch']}"
        if self.steps_per_epoch:
            epoch += f" ({(figures['step'] - 1) % self.steps_per_epoch + 1}/{self.steps_per_epoch})"
        parts = [f"step {figures['step']}", epoch]
        if figures["loss"] is not None:
            parts.append(f"loss {figures['loss']:.4f}")
        if figures["tokens_per_second"] is not None:
            parts.append(f"{figures['tokens_per_second']:,.0f} tokens/s")
        if figures["learning_rate"] is not None:
            parts.append(f"lr {figures['learning_rate']:.3g}")
        if figures["minutes_left"] is not None:
            parts.append(f"{figures['minutes_left']:.1f} min left")
        return "  ".join(parts)


def _atomic_replace(write, path, suffix=""):
    """`write(temporary_path)`, then rename it over `path` (atomic on POSIX).
    The temporary name keeps `suffix` last (Keras wants ".weights.h5")."""
    temporary = f"{path[: len(path) - len(suffix)]}.tmp-{os.getpid()}{suffix}"
    write(temporary)
    os.replace(temporary, path)


def read_best(output_dir):
    """The best-model record `{"step", "metric", "value", "weights", ...}` of
    a run with its weights file's full path, or None."""
    path = os.path.join(os.fspath(output_dir), BEST_RECORD_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as stream:
        record = json.load(stream)
    weights = os.path.join(os.fspath(output_dir), record.get("weights", ""))
    return {**record, "weights": weights} if os.path.isfile(weights) else None


class ValidationTranslation(_CountsRunSteps, keras.callbacks.Callback):
    """Validation BLEU/chrF every `every_steps`, early stopping, best weights kept.

    Crash safety: every validation ends by rewriting `best.json` (atomically),
    which holds the best record, the count of validations since it and the
    last validation's record. A new best's weights are written first, as
    `best-<step>.weights.h5`, and only `best.json` makes them the best, so
    after a kill at any point `best.json` names complete weights and any
    other `best-*` file is an orphan, deleted when the run resumes. A resumed
    run skips the validations `best.json` has (the replayed steps reach the
    same weights), restores the progress record of the last one if the kill
    lost it, and runs at once the validation that a kill interrupted at a
    step whose checkpoint was already written (the run resumes after it:
    `on_train_begin` does, or `validate_if_due` when there is nothing left
    to train).

    Args:
        translate: `texts -> translations` with the model being trained
            (e.g. a `Translator` over it).
        sources, references: the validation subset (fixed across validations).
        every_steps: validate after every this many steps.
        output_dir: where the best weights, `best.json` and the records go.
        metric: "bleu" or "chrf" (higher is better).
        patience: stop after this many validations without improvement
            (None: never stop early).
        min_delta: the least gain that counts as an improvement.
    """

    def __init__(self, translate, sources, references, every_steps, output_dir, metric="bleu", patience=None,
                 min_delta=0.0, stream=None):
        super().__init__()
        if metric not in ("bleu", "chrf"):
            raise ValueError(f"`metric` must be 'bleu' or 'chrf', got {metric!r}.")
        if len(sources) != len(references) or not sources:
            raise ValueError(
                f"validation needs as many references as sources (and at least one): "
                f"{len(sources)} sources, {len(references)} references."
            )
        self.translate = translate
        self.sources, self.references = list(sources), list(references)
        self.every_steps = every_steps
        self.output_dir = os.fspath(output_dir)
        self.metric = metric
        self.patience = patience
        self.min_delta = min_delta
        self.stream = stream or sys.stdout
        best = read_best(self.output_dir)
        # A resumed run keeps its best-so-far record.
        self.best = None if best is None else best["value"]
        self.best_step = None if best is None else best["step"]
        self.waited = 0 if best is None else best.get("validations_since_best", 0)
        self.validated_step = None if best is None else best.get("validated_step", best["step"])
        # A run that stopped early (and was then killed, or is run again) stays stopped.
        self.stopped_early = patience is not None and best is not None and self.waited >= patience
        self._remove_orphans(best)
        if best is not None:
            self._restore_lost_record(best)

    def _remove_orphans(self, best):
        """Best weights that `best.json` does not name, and temporary files:
        left by a kill before `best.json` was rewritten (or the old best
        removed)."""
        if not os.path.isdir(self.output_dir):
            return
        keep = None if best is None else os.path.basename(best["weights"])
        for name in os.listdir(self.output_dir):
            orphan = name.startswith("best-") and name.endswith(".weights.h5") and name != keep
            if orphan or name.startswith(BEST_RECORD_FILE + ".tmp-"):
                os.remove(os.path.join(self.output_dir, name))

    def _restore_lost_record(self, best):
        """A kill after `best.json` was rewritten and before the validation
        was logged loses that log line; `best.json` holds it."""
        path = os.path.join(self.output_dir, PROGRESS_FILE)
        record = best.get("last_validation")
        if record is None and "bleu" in best:  # written before best.json kept the last validation
            record = {"time": time.time(), "step": best["step"], "valid_bleu": best["bleu"],
                      "valid_chrf": best["chrf"], "validation_seconds": None, "best_step": best["step"]}
        if record is None:
            return
        logged = {r["step"] for r in read_records(path) if "valid_bleu" in r}
        if record["step"] not in logged:
            append_jsonl(path, {**record, "restored": True})

    def on_train_begin(self, logs=None):
        # Resumed from the checkpoint of a step whose validation was cut short.
        self.validate_if_due(logs)

    def on_train_batch_end(self, batch, logs=None):
        self.validate_if_due(logs)

    def validate_if_due(self, logs=None):
        """Validates when the current step is a validation step not validated yet."""
        step = self._run_step()
        if step == 0 or step % self.every_steps or (self.validated_step is not None and step <= self.validated_step):
            return
        from keras_transformer.decoding.evaluation import corpus_scores

        start = time.monotonic()
        hypotheses = self.translate(self.sources)
        scores = corpus_scores(hypotheses, self.references)
        value = float(scores[self.metric])
        improved = self.best is None or value - self.min_delta > self.best
        if improved:
            self.best, self.best_step, self.waited = value, step, 0
        else:
            self.waited += 1
        self.validated_step = step
        record = {"time": time.time(), "step": step, "valid_bleu": float(scores["bleu"]),
                  "valid_chrf": float(scores["chrf"]), "validation_seconds": time.monotonic() - start,
                  "best_step": self.best_step}
        if improved:
            self._save_best(step, value, scores, record)
        else:
            self._write_record(validations_since_best=self.waited, validated_step=step, last_validation=record)
        append_jsonl(os.path.join(self.output_dir, PROGRESS_FILE), record)
        if logs is not None:
            logs["valid_bleu"], logs["valid_chrf"] = record["valid_bleu"], record["valid_chrf"]
        note = "new best" if improved else f"best {self.best:.2f} at step {self.best_step}"
        print(f"validation at step {step}: BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  "
              f"({note}; {record['validation_seconds']:.0f}s)", file=self.stream, flush=True)
        if self.patience is not None and self.waited >= self.patience:
            print(f"early stop: no {self.metric} gain of {self.min_delta} in {self.waited} validations",
                  file=self.stream, flush=True)
            self.stopped_early = True
            self.model.stop_training = True

    def _save_best(self, step, value, scores, record):
        # New weights under their own name, then the record that names them,
        # then the old weights go: the record always names complete weights.
        previous = read_best(self.output_dir)
        name = f"best-{step}.weights.h5"
        _atomic_replace(lambda path: self.model.save_weights(path), os.path.join(self.output_dir, name),
                        suffix=".weights.h5")
        self._write_record(step=step, value=value, validations_since_best=0, weights=name,
                           bleu=float(scores["bleu"]), chrf=float(scores["chrf"]), validated_step=step,
                           last_validation=record)
        if previous is not None and os.path.basename(previous["weights"]) != name:
            os.remove(previous["weights"])

    def _write_record(self, **record):
        path = os.path.join(self.output_dir, BEST_RECORD_FILE)
        payload = {"metric": self.metric, **record}
        if "weights" not in payload:  # an update of the count keeps the rest of the record
            previous = read_best(self.output_dir)
            payload = {**previous, "weights": os.path.basename(previous["weights"]), **record}

        def write(temporary):
            with open(temporary, "w", encoding="utf-8") as stream:
                json.dump(payload, stream, indent=2)
                stream.flush()
                os.fsync(stream.fileno())

        _atomic_replace(write, path)
