"""Jupyter widgets over statistics Datasets (imported lazily: ``ipywidgets`` loads on first use).

- :func:`explore` -- interactive heatmap panel over any statistics Dataset.
- :func:`explore_model` -- measure a model's weights and watch the cells arrive
  in the same panel (progress, time left, Stop / Resume, a selection form); the pass itself is a
  :class:`LivePass` (no widgets).
- :func:`lab_explorer` -- the attention-activation lab's panel.
- :func:`train_your_own` -- train an attention activation next to softmax: menu, epochs, Run, progress.
- :func:`prompt_box` -- a text box and Run button over one text's activation statistics.
- :func:`export_html` -- the explorer as one self-contained HTML file (no kernel, no network).
"""

from __future__ import annotations

from toolkit._lazy import lazy_getattr

_LAZY = {
    "explore": "toolkit.widgets.entry",
    "Explorer": "toolkit.widgets.explorer",
    "explore_model": "toolkit.widgets._model",
    "ModelExplorer": "toolkit.widgets._model",
    "LivePass": "toolkit.widgets.live_pass",
    "lab_explorer": "toolkit.widgets.lab",
    "train_your_own": "toolkit.widgets.lab_train",
    "prompt_box": "toolkit.widgets.prompt",
    "PromptBox": "toolkit.widgets.prompt",
    "export_html": "toolkit.widgets.export",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr("toolkit.widgets", _LAZY, globals())


def __dir__():
    return sorted(set(globals()) | set(__all__))
