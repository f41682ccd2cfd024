"""Helpers shared by the format modules: dtype names, fingerprints, configs,
sharded indexes and ``transformers``' parameter renamings.

Nothing here reads tensor data. ``transformers`` is imported lazily, inside the
functions that need it, so ``import toolkit`` stays light.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from toolkit.errors import CheckpointFileError
from toolkit.sources.base import Source

#: Config keys every source guarantees where the config can give them.
STANDARD_KEYS = (
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "intermediate_size",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
)

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16 -> "bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def hub_sha256(path: str | os.PathLike) -> str:
    """The sha256 a Hugging Face cache gives a file, else ``""``.

    Files of a hub snapshot are links into ``blobs/``; a blob stored with Git
    LFS is named by the sha256 of its content (small files by a git sha1,
    which is not returned).
    """
    target = Path(os.path.realpath(path))
    if target.parent.name == "blobs" and _HEX64.match(target.name):
        return target.name
    return ""


def snapshot_revision(path: str | os.PathLike) -> str:
    """The commit of a path inside a Hugging Face cache snapshot, else ``""``.

    ``.../models--org--name/snapshots/<commit>/model.safetensors -> "<commit>"``.
    """
    parts = Path(os.path.abspath(path)).parts
    for i in range(len(parts) - 1):
        if parts[i] == "snapshots" and i > 0 and parts[i - 1].startswith("models--") and _HEX40.match(parts[i + 1]):
            return parts[i + 1]
    return ""


def fingerprint(files: Iterable[str | os.PathLike]) -> str:
    """A hex digest over each weight file's name, size, mtime and hub sha256.

    Changes when any file is replaced, grows, shrinks or is touched; equal for
    the same files seen through another path.
    """
    digest = hashlib.sha256()
    for f in sorted(map(str, files)):
        st = os.stat(f)
        digest.update(f"{Path(f).name}\0{st.st_size}\0{st.st_mtime_ns}\0{hub_sha256(f)}\n".encode())
    return digest.hexdigest()


def read_json(path: Path, what: str) -> dict:
    """Read a JSON object or raise :class:`CheckpointFileError` naming the file."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointFileError(path, f"cannot read the {what} as JSON ({exc}); re-download or re-save it") from exc
    if not isinstance(data, dict):
        raise CheckpointFileError(path, f"the {what} is not a JSON object; re-download or re-save it")
    return data


def read_index(index_path: Path) -> dict[str, str]:
    """The ``weight_map`` of a sharded checkpoint index: tensor name -> shard file name.

    Raises
    ------
    CheckpointFileError
        The index is not JSON or has no ``weight_map``.
    """
    data = read_json(index_path, "sharded checkpoint index")
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointFileError(
            index_path, "the index has no 'weight_map' (tensor name -> shard file); re-download or re-save it"
        )
    return {str(k): str(v) for k, v in weight_map.items()}


def shards_of(index_path: Path, weight_map: dict[str, str]) -> list[Path]:
    """Shard files an index names, in order, each checked to exist.

    Raises
    ------
    CheckpointFileError
        A shard the index names is missing from the directory.
    """
    folder = index_path.parent
    shards = sorted(set(weight_map.values()))
    missing = [s for s in shards if not (folder / s).is_file()]
    if missing:
        n = sum(1 for v in weight_map.values() if v in missing)
        raise CheckpointFileError(
            index_path,
            f"the index names shard(s) {', '.join(missing)} ({n} tensors) that are not in {str(folder)!r}. "
            "Download the missing shard(s) again (for a hub id: open_source(repo_id) while online), "
            "or re-save the checkpoint.",
        )
    return [folder / s for s in shards]


def read_config(folder: Path) -> dict:
    """``config.json`` of a checkpoint folder as a dict, ``{}`` when there is none."""
    path = folder / "config.json"
    return read_json(path, "config.json") if path.is_file() else {}


def normalize_config(raw: dict) -> dict:
    """The config dict, completed with the standard keys ``transformers`` derives.

    Keeps every key of ``raw`` as it is and adds each of ``model_type`` and
    :data:`STANDARD_KEYS` that is missing but that the ``transformers`` config
    class gives (defaults such as ``num_key_value_heads = num_attention_heads``,
    aliases such as GPT-2's ``n_layer``, a multimodal model's text config).
    A config class without ``num_key_value_heads`` / ``head_dim`` (BERT, GPT-2)
    has plain multi-head attention: they are set to ``num_attention_heads`` and
    ``hidden_size // num_attention_heads``. A ``model_type`` ``transformers``
    does not know leaves ``raw`` unchanged.
    """
    cfg = dict(raw)
    if not cfg.get("model_type"):
        return cfg
    try:
        from transformers import AutoConfig

        obj = AutoConfig.for_model(**cfg)
    except Exception:  # unknown model_type, or a config transformers refuses: keep what the file says
        return cfg
    text = obj.get_text_config() if hasattr(obj, "get_text_config") else obj
    for key in STANDARD_KEYS:
        if cfg.get(key) is None:
            value = getattr(text, key, None)
            if value is None and text is not obj:
                value = getattr(obj, key, None)
            if value is not None:
                cfg[key] = value
    heads = cfg.get("num_attention_heads")
    if isinstance(heads, int) and heads > 0:  # a config without these fields has plain multi-head attention
        cfg.setdefault("num_key_value_heads", heads)
        if isinstance(cfg.get("hidden_size"), int) and cfg.get("head_dim") is None:
            cfg["head_dim"] = cfg["hidden_size"] // heads
    return cfg


def transformers_renamer(config: dict) -> Callable[[str], str]:
    """The key renaming ``transformers`` applies on load, as a function.

    Uses ``transformers``' own checkpoint conversion mapping for the config's
    architecture class (else its ``model_type``) plus the ``legacy`` renamings
    (``LayerNorm.gamma -> LayerNorm.weight``...). Only one-to-one renamings are
    applied; converters that fuse several stored tensors into one parameter
    (MoE experts into ``gate_up_proj``) are not, so such tensors keep their
    stored names. Identity when ``transformers`` has no such mapping.
    """
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
        from transformers.core_model_loading import WeightRenaming, apply_renamings
    except ImportError:
        return lambda name: name
    renamings = []
    for key in [*(config.get("architectures") or []), config.get("model_type")]:
        found = get_checkpoint_conversion_mapping(key) if key else None
        if found is not None:
            renamings += [copy.deepcopy(t) for t in found if isinstance(t, WeightRenaming)]
            break
    legacy = get_checkpoint_conversion_mapping("legacy") or []
    renamings += [copy.deepcopy(t) for t in legacy if isinstance(t, WeightRenaming)]
    if not renamings:
        return lambda name: name
    return lambda name: apply_renamings(name, renamings)


class FileSource(Source):
    """A :class:`Source` over weight files on local disk (the format classes' base).

    Parameters
    ----------
    location : str
        What to show as the source (a path, or the hub id it came from).
    format : str
        ``"safetensors"``, ``"pytorch"`` or ``"gguf"``.
    config : dict
        The normalised ``transformers`` config.
    files : list of path-like
        The weight files; the fingerprint covers all of them.
    revision : str, default ""
        Hub commit; found from a cache snapshot path when not given.
    """

    def __init__(self, *, location: str, format: str, config: dict, files: list, revision: str = ""):
        self.location = str(location)
        self.format = format
        self.config = config
        self._files = [str(f) for f in files]
        self.fingerprint = fingerprint(self._files)
        self.revision = revision or (snapshot_revision(self._files[0]) if self._files else "")

    def files(self) -> list[str]:
        """The weight files this source reads, absolute paths."""
        return list(self._files)
