"""Copies of a checkpoint folder with its JSON config and its tensors edited: the hostile inputs of the tests."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from safetensors.torch import load_file, save_file


def edited(src: Path, folder: Path, config: dict | Callable[[dict], dict] | None = None,
           tensors: Callable[[dict], object] | None = None, *, config_name: str = "config.json",
           weights_name: str = "model.safetensors") -> Path:
    """A copy of the checkpoint folder ``src`` at ``folder``.

    Parameters
    ----------
    config : dict or callable, optional
        Merged into ``config_name`` (a dict), or ``config(cfg) -> new cfg`` (a callable).
    tensors : callable, optional
        ``tensors(t)`` edits the ``{name: tensor}`` of ``weights_name`` in place (saved contiguous).
    config_name, weights_name : str
        ``adapter_config.json`` / ``adapter_model.safetensors`` for a LoRA adapter.
    """
    shutil.copytree(src, folder)
    cfg = json.loads((folder / config_name).read_text())
    cfg = config(cfg) if callable(config) else {**cfg, **(config or {})}
    (folder / config_name).write_text(json.dumps(cfg))
    if tensors is not None:
        t = load_file(str(folder / weights_name))
        tensors(t)
        save_file({k: v.contiguous() for k, v in t.items()}, str(folder / weights_name))
    return folder
