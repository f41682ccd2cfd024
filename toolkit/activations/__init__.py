"""Activation, attention and gradient statistics through forward hooks.

Weights say what a model could do; activations say what it does on text. A
forward pass with hooks fills the same ``(layer, component)`` grid as
:func:`toolkit.weight_stats` (through the same component mapping, fused
modules split the same way), plus ``(layer, head)`` attention statistics.

Public API
----------
activation_stats(source=None, texts=None, ...) -> xarray.Dataset
    The statistics (see its docstring for every variable).
load_model(source=None) -> Loaded
    Build a model and its tokenizer once (``.model``, ``.tokenizer``); pass
    the result as ``source`` to run several text sets without reloading.
load_prompts(path=None) -> list of str
    The default texts, ``data/prompts.txt`` (installed with the package; texts separated by ``---`` lines).
DEFAULT_PROMPTS
    Path of that file.
head_statistics(a, causal=...) -> tensor (3, heads)
    Frobenius norm, entropy and sink mass of one text's attention maps.

Modules: :mod:`.hooks` (running reductions), :mod:`.attention` (eager maps,
per-head statistics), :mod:`.gradients` (next-token loss, gradient norms),
:mod:`.inputs` (texts -> padded batches), :mod:`.model` (loading),
:mod:`.definitions` (names, units, formulas, references), :mod:`.collect`.
"""

from __future__ import annotations

from toolkit.activations.attention import head_statistics
from toolkit.activations.collect import activation_stats
from toolkit.activations.definitions import STATS
from toolkit.activations.inputs import DEFAULT_PROMPTS, load_prompts
from toolkit.activations.model import Loaded, load_model

__all__ = ["DEFAULT_PROMPTS", "STATS", "Loaded", "activation_stats", "head_statistics", "load_model", "load_prompts"]
