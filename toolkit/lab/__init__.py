"""The attention-activation lab: softmax vs polynomial attention in a small ViT.

Reproduces, on scikit-learn's 8 × 8 digits, the experiment of Saratchandran
et al. (arXiv:2410.18613): train a 12-layer ViT once per attention activation
(softmax, x/1, x/16, x³/1, x³/16) and follow the Frobenius norm of every
layer's attention matrix over training.

>>> from toolkit.lab import run_experiment, load_result
>>> ds = load_result()                     # the committed 200-epoch run, N = 17 tokens
>>> ds65 = load_result("up16")             # the committed N = 65 run
>>> fresh = run_experiment(["softmax", "x²/4"], preset="fast", out="my_lab.nc")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from toolkit.constraints import Optional, PathName, checks_options
from toolkit.data import data_path
from toolkit.lab.attention import (
    Attention,
    AttentionActivation,
    UnknownActivationError,
    frobenius_norm,
    parse_activation,
)
from toolkit.lab.cli import main
from toolkit.lab.train import PAPER_ACTIVATIONS, PRESETS, LabConfig, LabConfigMismatchError, run_experiment
from toolkit.lab.vit import ViT

#: The committed result of ``python -m toolkit.lab --preset full``: ``data/attention_lab.nc``,
#: installed with the package (read-only: new runs go elsewhere).
RESULT_PATH = data_path("attention_lab.nc")
#: The committed results by preset: N = 17 (``full``) and N = 65 (``up16``, ``data/attention_lab_n65.nc``).
RESULTS = {"full": RESULT_PATH, "up16": data_path("attention_lab_n65.nc")}

__all__ = [
    "Attention",
    "AttentionActivation",
    "LabConfig",
    "LabConfigMismatchError",
    "PAPER_ACTIVATIONS",
    "PRESETS",
    "RESULTS",
    "RESULT_PATH",
    "UnknownActivationError",
    "ViT",
    "frobenius_norm",
    "load_result",
    "main",
    "parse_activation",
    "run_experiment",
]


@checks_options(path=Optional(PathName()))
def load_result(path=None):
    """Open a lab result (default: the committed 200-epoch run) into memory.

    Parameters
    ----------
    path : path or str, optional
        A NetCDF written by :func:`run_experiment`, or the name of a committed
        run in :data:`RESULTS` (``"full"``: N = 17; ``"up16"``: N = 65);
        default :data:`RESULT_PATH`.

    Returns
    -------
    xarray.Dataset
        dims (activation, epoch, layer, head).
    """
    from toolkit.lab.dataset import read_netcdf

    if isinstance(path, str) and path in RESULTS:
        path = RESULTS[path]
    path = Path(path) if path is not None else RESULT_PATH
    if not path.exists():
        from toolkit.errors import SourceNotFoundError

        raise SourceNotFoundError(str(path), "no lab result there; run `python -m toolkit lab` to make one")
    return read_netcdf(path)
