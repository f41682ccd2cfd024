"""A GGUF file as a source: one record per parameter ``transformers`` fills from it.

The plan of the file (which parameters each stored tensor feeds, the config)
comes from the toolkit's own table for the common layouts
(:mod:`toolkit.sources.gguf.own_plan`) and from ``transformers`` for the
others (:mod:`toolkit.sources.gguf.transformers_plan`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import torch

from toolkit.config_keys import normalize_config
from toolkit.errors import SourceNotFoundError
from toolkit.sources._common import FileSource
from toolkit.sources.base import TensorRecord
from toolkit.sources.formats import CheckpointFormat
from toolkit.sources.gguf.own_plan import OwnPlan
from toolkit.sources.gguf.sizes import check_declared_sizes
from toolkit.sources.gguf.table import read_gguf_table
from toolkit.sources.gguf.transformers_plan import TransformersPlan

#: GGUF float types kept in their own dtype by ``read()`` (when exact).
_FLOAT_TYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


@functools.lru_cache(maxsize=8)
def _plan(path: str, *identity: int) -> TransformersPlan | OwnPlan:
    """The plan of a file, kept for the same path and stat identity (size, times, inode: a rewrite misses).

    From the toolkit's own table (:class:`~toolkit.sources.gguf.own_plan.OwnPlan`, no
    ``transformers`` import) when it covers the file, else from ``transformers``
    (:class:`~toolkit.sources.gguf.transformers_plan.TransformersPlan`).
    """
    table = read_gguf_table(path)
    own = OwnPlan.of(table)
    if own is not None:
        check_declared_sizes(table, own.raw_config)
        return own
    return TransformersPlan(path, table)


def _normalized(raw: dict) -> dict:
    """:func:`normalize_config`, asking ``transformers``' config class only for standard keys the header lacks
    (it fills nothing else; importing it is most of the opening time of a small file)."""
    from toolkit.config_keys import STANDARD_KEYS

    missing = any(normalize_config(raw, use_transformers=False).get(k) is None for k in STANDARD_KEYS)
    return normalize_config(raw, use_transformers=missing)


class GGUFSource(FileSource):
    """Tensors of one GGUF file, named as ``transformers`` names the parameters.

    Parameters
    ----------
    path : Path
        The ``.gguf`` file.
    location : str, optional
        Shown as the source (default: the path).
    revision : str, default ""
        Hub commit, when the file came from the hub.

    Attributes
    ----------
    dropped : list of str
        GGUF tensors ``transformers`` does not load (no parameter maps to them,
        e.g. ``rope_freqs.weight``); they get no record (:attr:`Source.dropped`).

    Raises
    ------
    CheckpointFileError
        Not a GGUF file, truncated, or an architecture ``transformers`` cannot read.
    """

    def __init__(self, path: Path, *, location: str | None = None, revision: str = ""):
        st = os.stat(path)
        self._plan = _plan(str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
        super().__init__(
            location=location or str(path), format="gguf", config=_normalized(self._plan.raw_config),
            files=[path], revision=revision,
        )
        self.dropped = list(self._plan.dropped)
        self._cache: tuple[int, dict[str, torch.Tensor]] | None = None

    def reopen_kwargs(self) -> dict:
        """The hub commit (for a hub checkpoint) and ``{"gguf_file": <the file's name>}``."""
        return {**super().reopen_kwargs(), "gguf_file": Path(self.files()[0]).name}

    def _read(self, name: str) -> torch.Tensor:
        group, _ = self._plan.outputs[name]
        cached = self._cache  # one read: a pass's reader threads share this source (another may reset it)
        if cached is not None and cached[0] == group:
            tensors = cached[1]
        else:
            self._cache = None
            tensors = self._plan.materialise(group)
            if len(tensors) > 1:  # one stored tensor split into several parameters: keep the rest
                self._cache = (group, tensors)
        tensor = tensors[name]
        sources = self._plan.groups[group]
        kind = self._plan.table.tensors[sources[0]].type_name
        want = _FLOAT_TYPES.get(kind)
        if len(sources) == 1 and want is not None and want != tensor.dtype:
            narrowed = tensor.to(want)
            if torch.equal(narrowed.to(tensor.dtype), tensor):  # exact: keep the storage dtype
                tensor = narrowed
        return tensor

    def tensors(self) -> Iterator[TensorRecord]:
        """Yield one record per parameter ``transformers`` fills from this file.

        Yields
        ------
        TensorRecord
            ``dtype`` is the GGUF storage type (``"Q4_K"``, ``"float32"``...);
            ``read()`` returns float32 for quantised types and the stored float
            dtype for F16/BF16/F32 when the processed values fit it exactly.
        """
        table = self._plan.table
        for name, (group, shape) in self._plan.outputs.items():
            infos = [table.tensors[i] for i in self._plan.groups[group]]
            kinds = sorted({i.type_name for i in infos})
            dtype = ",".join(str(_FLOAT_TYPES[k]).removeprefix("torch.") if k in _FLOAT_TYPES else k for k in kinds)
            stored = ",".join(i.name for i in infos)
            yield TensorRecord(
                name, shape, dtype, functools.partial(self._read, name), file=table.path, stored_name=stored,
            )


class GGUFFormat(CheckpointFormat):
    """The registry entry of GGUF files (:mod:`toolkit.sources.formats`): a ``.gguf`` file, a folder's
    only ``.gguf``, or the one ``gguf_file=`` names."""

    name = "gguf"
    description = "*.gguf (any quantisation), named by gguf_file= when the folder holds several"
    open_parameters = ("gguf_file",)
    decoders = ("gguf", "transformers")  # gguf.dequantize and transformers' tensor processors

    def guess_can_open(self, path: Path, *, gguf_file: str | None = None, **options) -> bool:
        """A ``.gguf`` file, or a folder holding one or named with ``gguf_file``."""
        if path.is_dir():
            return bool(gguf_file) or any(path.glob("*.gguf"))
        return path.name.endswith(".gguf")

    def open(self, path: Path, *, location: str | None = None, revision: str = "", gguf_file: str | None = None,
             **options) -> GGUFSource:
        """Open the ``.gguf`` file ``path``, or the one of the folder ``path`` (``gguf_file``, else its only one).

        Raises
        ------
        SourceNotFoundError
            ``gguf_file`` is not in the folder, or names another file than the
            ``.gguf`` path given; the folder holds several ``.gguf`` files and
            no ``gguf_file`` chooses one.
        CheckpointFileError
            Not a GGUF file, truncated, or an architecture ``transformers`` cannot read.
        """
        if path.is_dir():
            path = self._chosen(path, gguf_file)
        elif gguf_file and gguf_file != path.name:
            raise SourceNotFoundError(
                path, f"gguf_file={gguf_file!r} names another file than the .gguf path given; pass the folder "
                "with gguf_file=..., or the .gguf path alone"
            )
        return GGUFSource(path, location=location, revision=revision)

    @staticmethod
    def _chosen(folder: Path, gguf_file: str | None) -> Path:
        if gguf_file:
            path = folder / gguf_file
            if not path.is_file():
                ggufs = sorted(p.name for p in folder.glob("*.gguf"))
                raise SourceNotFoundError(
                    path, f"no file {gguf_file!r} in {str(folder)!r}; GGUF files there: {', '.join(ggufs) or 'none'}. "
                    "Pass one of those as gguf_file=, or the full path of the .gguf file"
                )
            return path
        ggufs = sorted(folder.glob("*.gguf"))
        if len(ggufs) > 1:
            raise SourceNotFoundError(
                folder, f"the folder holds several GGUF files ({', '.join(p.name for p in ggufs)}); choose one with "
                "gguf_file='...'"
            )
        return ggufs[0]

