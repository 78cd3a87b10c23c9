"""The paper's WMT 2014 English->French setups: train, average, evaluate.

    python recipes/wmt14_en_fr/prepare.py tfds --out runs/wmt14_en_fr
    python recipes/wmt14_en_fr/run.py --config recipes/wmt14_en_fr/base.yaml [--gpu-tokens 6250]

The same steps as the English-German recipe, whose run.py this one runs:
`--gpu-tokens N` is what one GPU holds per step, and gradients are
accumulated up to the paper's ~25,000 tokens per update. Training resumes
from the newest checkpoint when run again. At the end the last checkpoints
are averaged (5 base, 20 big) and newstest2014 is decoded with beam 4 and
length penalty 0.6 and scored with sacreBLEU.
"""

import importlib.util
import sys
from pathlib import Path

EN_DE_RUN = Path(__file__).resolve().parents[1] / "wmt14_en_de" / "run.py"


def _en_de_run():
    spec = importlib.util.spec_from_file_location("wmt14_en_de_run", EN_DE_RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    return _en_de_run().main(argv, description=__doc__, paper_bleu="38.1 base / 41.8 big")


if __name__ == "__main__":
    sys.exit(main())
