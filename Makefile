PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test install quickstart clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,docs]"
	touch $(STAMP)

install: $(STAMP)

# The whole suite: backend-agnostic tests once per Keras backend, then the
# TensorFlow-only tests (tf.data, MirroredStrategy, export, the documentation's
# commands and `mkdocs build --strict`) once.
test: $(STAMP)
	$(BIN)/python tests/run_all.py

# The main job: generate a corpus, train, evaluate, export, translate.
quickstart: $(STAMP)
	$(BIN)/python recipes/quickstart/run.py

clean:
	rm -rf $(VENV)
