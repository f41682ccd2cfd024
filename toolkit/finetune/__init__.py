"""A real fine-tuning run to compare against: a few dozen CPU steps, bf16 checkpoints.

:func:`finetune` loads a causal language model (default: the embedded
SmolLM2-135M-Instruct GGUF, dequantised), rounds it to bf16, trains all of
its weights (full fine-tuning, float32 master weights, AdamW, no weight decay)
on a text file (default ``data/finetune.txt``, shipped in the
package: math word problems with worked answers) and saves ``step-NNNNN/``
checkpoints in bf16 as real runs store them, step 0 (the starting point)
included. Each checkpoint is a folder that ``transformers`` and
:func:`toolkit.open_source` read (``config.json``, ``model.safetensors``, the
tokenizer). ``run.json`` in the run folder lists the settings, checkpoints and
per-step losses; a second call with the same settings returns the finished run
without training again.

Command line: ``python -m toolkit finetune OUT_DIR [--preset short|full] ...``
(or ``python -m toolkit.finetune``).
"""

from toolkit.constraint_types import Exempt
from toolkit.constraints import checks_options
from toolkit.finetune.model import load_causal_lm, save_checkpoint
from toolkit.finetune.run import DEFAULT_TEXT, PRESETS, FinetuneRun, finetune, load_run

__all__ = ["DEFAULT_TEXT", "PRESETS", "FinetuneRun", "finetune", "load_causal_lm", "load_run", "main",
           "save_checkpoint"]


@checks_options(argv=Exempt("the command line's arguments (None: sys.argv); a bad one is argparse's one-line "
                             "error, exit 2"))
def main(argv: list[str] | None = None) -> int:
    """``python -m toolkit.finetune OUT_DIR ...`` (see :mod:`toolkit.finetune.cli`)."""
    from toolkit.finetune.cli import main as _main

    return _main(argv)
