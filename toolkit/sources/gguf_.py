"""GGUF files, named and valued as ``transformers`` loads them.

``transformers`` loads a GGUF checkpoint by (1) deriving a config from the
metadata, (2) building a GGUF-name -> parameter-name map from a model
instance (``get_gguf_hf_weights_map``), (3) dequantising every tensor with
``gguf.dequantize`` and (4) passing it through a per-architecture
``TensorProcessor`` (llama's q/k un-permutation, gemma's ``norm - 1``,
MoE expert merges...). This module runs the same functions, one stored
tensor at a time: the config comes from the header read once by
:func:`~toolkit.sources._gguf_table.read_gguf_table` (:func:`gguf_config`),
the map from a model built on the ``meta`` device (no weights), and which
parameters each stored tensor feeds is learnt by running the processor on a
zero-stride placeholder array (no file data).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from toolkit.config_keys import normalize_config
from toolkit.errors import CheckpointFileError
from toolkit.sources._common import FileSource, shown, size_problems
from toolkit.sources._gguf_table import GGUFArray, GGUFTable, read_gguf_table, tensor_data
from toolkit.sources.base import TensorRecord
from toolkit.sources.gguf_names import OwnPlan

#: GGUF float types kept in their own dtype by ``read()`` (when exact).
_FLOAT_TYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def gguf_config(path: str, architecture: str, table: GGUFTable | None = None) -> dict:
    """The config dict ``transformers`` derives from a GGUF file's metadata.

    Equal to ``load_gguf_checkpoint(path, return_tensors=False)["config"]``,
    what ``from_pretrained(..., gguf_file=...)`` builds its config from. That
    function parses the whole file with ``gguf.GGUFReader``, tokenizer
    included (5-20 s for the bundled models); here the same config is built
    from the header this toolkit reads anyway (:func:`read_gguf_table`,
    about 0.05 s), with ``transformers``' own tables: the key renamings
    ``GGUF_TO_TRANSFORMERS_MAPPING["config"]``, the defaults
    ``GGUF_CONFIG_DEFAULTS_MAPPING`` and the steps ``load_gguf_checkpoint``
    applies around them (architecture renames, ``tie_word_embeddings`` from
    the tensor names, ``gemma3`` -> ``gemma3_text``, the vocabulary size from
    the token list). The architectures ``load_gguf_checkpoint`` post-processes
    further (:data:`_REPLAYED_BY_TRANSFORMERS`), and any ``transformers``
    older than 5, get their config from ``load_gguf_checkpoint`` itself.
    Nothing is patched in either case.

    Parameters
    ----------
    path : str
        The ``.gguf`` file.
    architecture : str
        Its ``general.architecture`` (for the error message).
    table : GGUFTable, optional
        The file's header, when already read.

    Raises
    ------
    CheckpointFileError
        ``transformers`` cannot read this GGUF architecture.
    """
    try:
        if table is None:
            table = read_gguf_table(path)
        config = _config_from_header(table)
        if config is None:
            from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

            config = load_gguf_checkpoint(path, return_tensors=False)["config"]
        return config
    except _MODEL_CODE_ERRORS as exc:
        if isinstance(exc, _LET_THROUGH):
            raise
        import transformers

        raise CheckpointFileError(
            path, f"transformers {transformers.__version__} cannot read GGUF architecture {shown(architecture)} "
            f"({_one_line(exc)}); use the model's safetensors checkpoint instead, or upgrade transformers"
        ) from exc


#: ``general.architecture`` substrings whose config ``load_gguf_checkpoint`` builds with steps of its
#: own beyond the key tables (t5's gated activation and classes, stablelm's flags from tensor names,
#: gpt-oss's rope scaling, minimax-m2's scoring function), and the renamed architectures likewise
#: (lfm2's per-layer key-value heads, gemma4's end-of-generation tokens): those files' configs come
#: from ``load_gguf_checkpoint`` itself.
_REPLAYED_BY_TRANSFORMERS = ("t5", "stablelm", "gpt_oss", "gpt-oss", "minimax-m2")
_RENAMED_REPLAYED_BY_TRANSFORMERS = ("lfm2", "gemma4")


def _config_from_header(table: GGUFTable) -> dict | None:
    """``load_gguf_checkpoint``'s config, built from the header; None where only that function can build it.

    Follows ``transformers.modeling_gguf_pytorch_utils.load_gguf_checkpoint``
    (transformers 5) step for step, for every architecture that function
    handles with its tables alone.
    """
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        return None
    from transformers.integrations import GGUF_CONFIG_DEFAULTS_MAPPING
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES, GGUF_TO_TRANSFORMERS_MAPPING

    meta = table.metadata
    if "general.architecture" not in meta:
        raise CheckpointFileError(table.path, "the GGUF metadata has no general.architecture; re-download the file")
    architecture = _python_value(meta["general.architecture"])
    if not isinstance(architecture, str) or not architecture or len(architecture) > 256:
        raise CheckpointFileError(
            table.path, f"general.architecture is {shown(architecture)}, not an architecture name; re-download the file"
        )
    if any(part in architecture for part in _REPLAYED_BY_TRANSFORMERS):
        return None
    updated = architecture
    if "llama" in architecture and meta.get("general.name") == "mistral":  # load_gguf_checkpoint's rule, verbatim
        updated = "mistral"
    if "qwen2moe" in architecture:
        updated = "qwen2_moe"
    elif "qwen3moe" in architecture:
        updated = "qwen3_moe"
    if updated in _RENAMED_REPLAYED_BY_TRANSFORMERS:
        return None
    if architecture not in GGUF_SUPPORTED_ARCHITECTURES and updated not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ValueError(f"GGUF model with architecture {architecture} is not supported yet.")

    config: dict = {}
    config["tie_word_embeddings"] = (
        all(t.name != "output.weight" for t in table.tensors) or architecture in ("falcon", "bloom")
    )
    defaults = GGUF_CONFIG_DEFAULTS_MAPPING.get(updated, GGUF_CONFIG_DEFAULTS_MAPPING.get(architecture) or {})
    for key, value in defaults.items():
        config.setdefault(key, value)
    config_names = GGUF_TO_TRANSFORMERS_MAPPING["config"]
    token_names = GGUF_TO_TRANSFORMERS_MAPPING["tokenizer"]
    tokens = None
    for gguf_key, raw in meta.items():
        prefix, _, rest = gguf_key.replace(architecture, updated).partition(".")
        if token_names.get(prefix, {}).get(rest) == "tokens":
            tokens = raw
        renamed = config_names.get(prefix, {}).get(rest, -1)
        if renamed is None or renamed == -1:
            continue
        value = _python_value(raw)
        if isinstance(value, str) and architecture in value:
            value = value.replace(architecture, updated)
        config[renamed] = value
    if config.get("model_type") == "gemma3":  # the GGUF holds the text backbone only
        config["model_type"] = "gemma3_text"
    if "vocab_size" not in config and tokens is not None:  # from the token list, as transformers does
        config["vocab_size"] = _length(tokens)
    return config


def _python_value(raw):
    """A metadata value as ``load_gguf_checkpoint`` parses it: an array as a list, one of one element as that."""
    if not isinstance(raw, GGUFArray):
        return raw
    values = raw.values()
    return values[0] if len(values) == 1 else values


def _length(raw) -> int:
    """``len()`` of a value as :func:`_python_value` gives it, without reading a long array."""
    if isinstance(raw, GGUFArray) and raw.count != 1:
        return raw.count
    return len(_python_value(raw))


def meta_model(config: dict, path: str = "") -> torch.nn.Module:
    """A model of this config on the ``meta`` device (shapes only, no memory).

    Tries the config's ``architectures`` class, then ``AutoModelForCausalLM``,
    ``AutoModelForSeq2SeqLM`` and ``AutoModel``, as ``from_pretrained`` of a
    GGUF file is usually called.

    Raises
    ------
    CheckpointFileError
        No class accepts the config (``path`` names the file in the message).
    """
    import transformers
    from transformers import AutoConfig

    with _model_code(path, "transformers refuses the config its metadata gives"):
        cfg = AutoConfig.for_model(**config)
    named = [getattr(transformers, a, None) for a in (cfg.architectures or [])]
    autos = [transformers.AutoModelForCausalLM, transformers.AutoModelForSeq2SeqLM, transformers.AutoModel]
    errors = []
    with torch.device("meta"):
        for cls in [c for c in named if c is not None] + autos:
            try:
                return cls.from_config(cfg) if cls in autos else cls(cfg)
            except _MODEL_CODE_ERRORS as exc:
                if isinstance(exc, _LET_THROUGH):
                    raise
                errors.append(f"{cls.__name__}: {type(exc).__name__}: {_one_line(exc, 200)}")
    raise CheckpointFileError(path, "no transformers model class builds its config: " + "; ".join(errors))


class _Shallow:
    """A model seen to ``get_gguf_hf_weights_map`` only down to its direct children.

    That function recurses into every submodule and builds gguf's
    ``TensorNameMap`` at each (about 40 ms each, hundreds of modules, 15+ s for
    a 30-layer model); the names it can map are found at the top (a
    ``BloomModel`` checkpoint needs one level down). The map it returns is the
    same as the full recursion's for the bundled llama and gemma3 files
    (checked by the tests).
    """

    def __init__(self, module: torch.nn.Module, depth: int = 1):
        self._module, self._depth = module, depth

    @property
    def config(self):
        return self._module.config

    def state_dict(self) -> dict:
        return self._module.state_dict()

    def named_children(self) -> list:
        if self._depth <= 0:
            return []
        return [(n, _Shallow(c, self._depth - 1)) for n, c in self._module.named_children()]


class _Touched(dict):
    """The dict processors write parameters into, noting which keys they touch
    (an MoE merge writes its second half in place, into an existing key)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.keys_touched: list[str] = []

    def _touch(self, key) -> None:
        if key not in self.keys_touched:
            self.keys_touched.append(key)

    def __getitem__(self, key):
        self._touch(key)
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        self._touch(key)
        super().__setitem__(key, value)


class _Plan:
    """What transformers does with each stored tensor of one GGUF file."""

    def __init__(self, path: str, table: GGUFTable | None = None):
        from transformers.modeling_gguf_pytorch_utils import (
            TENSOR_PROCESSORS,
            TensorProcessor,
            get_gguf_hf_weights_map,
        )

        self.table: GGUFTable = table or read_gguf_table(path)
        arch = self.table.architecture
        _refuse_packed_path(path, arch)
        self.raw_config = gguf_config(path, arch, self.table)
        check_declared_sizes(self.table, self.raw_config)  # before anything is built from them
        with _model_code(path, "cannot build the model its metadata describes"):
            self.processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=self.raw_config)
            model = meta_model(self.raw_config, path)
            self.key_map = get_gguf_hf_weights_map(_Shallow(model), self.processor)
            del model
        # probe: which parameters does each stored tensor feed, with which shape
        outputs: dict[str, tuple[list[int], tuple[int, ...]]] = {}
        parent = list(range(len(self.table.tensors)))

        def find(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        self.dropped: list[str] = []
        for i, info in enumerate(self.table.tensors):
            placeholder = np.broadcast_to(np.zeros((), np.float32), info.shape)
            with _model_code(path, f"tensor {info.name!r} (shape {info.shape}) does not fit the model its metadata "
                             "describes"):
                fed = self._process(placeholder, info.name, {"tensors": {}}, copy=False)
            if not fed:
                self.dropped.append(info.name)
            for name, shape in fed.items():
                sources = outputs.setdefault(name, ([], shape))[0]
                if sources:
                    parent[find(i)] = find(sources[0])
                sources.append(i)
        self.outputs = {name: (find(srcs[0]), shape) for name, (srcs, shape) in outputs.items()}
        self.groups: dict[int, list[int]] = {}
        for i in range(len(parent)):
            if self.table.tensors[i].name not in self.dropped:
                self.groups.setdefault(find(i), []).append(i)

    def _process(self, weights, name: str, parsed: dict, copy: bool = True) -> dict:
        """One stored tensor through the processor, as ``load_gguf_checkpoint`` does.

        Returns ``{parameter name: shape}`` of the parameters it fed: the one
        the name map gives, or those the processor itself wrote (GPT-2's
        ``lm_head``, MoE experts split or merged into ``parsed``).
        """
        parsed["tensors"] = touched = _Touched(parsed["tensors"])
        result = self.processor.process(
            weights=weights, name=name, tensor_key_mapping=self.key_map, parsed_parameters=parsed
        )
        fed = {k: tuple(touched[k].shape) for k in touched.keys_touched}
        if result.name is not None and result.name in self.key_map:
            target = self.key_map[result.name]
            if copy:  # transformers copies every array; only read-only or strided ones need it
                weights = result.weights
                if not (weights.flags.writeable and weights.flags.c_contiguous):
                    weights = np.copy(weights)
                parsed["tensors"][target] = torch.from_numpy(weights)
            fed[target] = tuple(np.shape(result.weights))
        return fed

    def materialise(self, group: int) -> dict[str, torch.Tensor]:
        """Dequantise and process the stored tensors of one group (usually one tensor)."""
        from gguf import dequantize

        parsed: dict = {"tensors": {}}
        for i in self.groups[group]:
            info = self.table.tensors[i]
            try:
                weights = dequantize(tensor_data(info, self.table.path), info.ggml_type)
            except _MODEL_CODE_ERRORS as exc:
                raise dequantise_error(self.table.path, info, exc) from exc
            with _model_code(self.table.path, f"tensor {info.name!r} cannot be processed"):
                self._process(weights, info.name, parsed)
        return parsed["tensors"]


#: What ``transformers``' model code, processors and config classes raise on sizes that cannot work.
#: (``ValueError``, ``ZeroDivisionError``, ``huggingface_hub``'s ``StrictDataclassClassValidationError`` of a
#: config class...: too many kinds to list; a ``MemoryError`` is let through, see :data:`_LET_THROUGH`.)
_MODEL_CODE_ERRORS = (Exception,)
#: Never turned into a :class:`CheckpointFileError`: ours already, or no statement about the file.
_LET_THROUGH = (CheckpointFileError, MemoryError)


def dequantise_error(path: str, info, exc: BaseException) -> BaseException:
    """The error to raise when ``gguf.dequantize`` fails on a stored tensor (``exc`` itself when let through)."""
    if isinstance(exc, _LET_THROUGH):
        return exc
    if isinstance(exc, NotImplementedError):
        return CheckpointFileError(path, f"tensor {info.name!r}: {exc}")
    return CheckpointFileError(
        path, f"tensor {info.name!r} (shape {info.shape}, {info.type_name}) cannot be dequantised "
        f"({type(exc).__name__}: {_one_line(exc, 200)}); re-download or re-convert the file",
    )


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message on one line, shortened (messages are printed on one line)."""
    return " ".join(str(exc).split())[:limit]


@contextlib.contextmanager
def _model_code(path: str, what: str):
    """Turn an error of ``transformers``' code run on this file's metadata into a :class:`CheckpointFileError`."""
    try:
        yield
    except _LET_THROUGH:
        raise
    except _MODEL_CODE_ERRORS as exc:
        raise CheckpointFileError(
            path, f"{what} ({type(exc).__name__}: {_one_line(exc)}); the metadata or the tensor table is "
            "corrupted or from another model: re-download or re-convert the file",
        ) from exc


_BLOCK = re.compile(r"^blk\.(\d+)\.")
#: Sizes no tensor dimension can be smaller than (the embedding has the hidden size, heads fit in it...).
_DIM_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim")


def _gguf_key(table: GGUFTable, key: str) -> str:
    """The metadata key a config key comes from (``llama.block_count`` for ``num_hidden_layers``), else ``key``."""
    from toolkit.sources import gguf_names

    arch = table.architecture
    if arch in gguf_names.ARCHITECTURES:  # the own table: no transformers import for an error message
        tables = [gguf_names.CONFIG_KEYS[arch]]
    else:
        try:
            from transformers.modeling_gguf_pytorch_utils import GGUF_TO_TRANSFORMERS_MAPPING

            tables = GGUF_TO_TRANSFORMERS_MAPPING["config"].values()
        except (ImportError, KeyError):
            return key
    for gguf_key in table.metadata:
        prefix, _, rest = gguf_key.partition(".")
        if prefix == arch and any(names.get(rest) == key for names in tables):
            return f"{gguf_key} ({key})"
    return key


def check_declared_sizes(table: GGUFTable, config: dict) -> None:
    """Check the sizes a GGUF file's metadata declares against its tensor table, before anything is built.

    A model is built (on the meta device) from these sizes, and name maps for
    each declared layer: a ``block_count`` of 100000 over a table of 30
    blocks would cost minutes and gigabytes. So the sizes must be positive
    integers, the layer count must be the number of ``blk.N`` blocks the
    table holds (or at most the number of tensors when it has no such
    names), and no width or head count may exceed the largest tensor
    dimension. The cost of the check is proportional to the table.

    Raises
    ------
    CheckpointFileError
        Naming the metadata key, its value and what the table holds.
    """
    path = table.path
    problems = size_problems(config)
    if problems:
        named = [_gguf_key(table, p.split("=", 1)[0]) + "=" + p.split("=", 1)[1] for p in problems]
        raise CheckpointFileError(
            path, f"the GGUF metadata declares {', '.join(named)}: sizes, layer and head counts must be positive "
            "integers; the header is corrupted, re-download or re-convert the file",
        )
    layers = config.get("num_hidden_layers")
    if isinstance(layers, int):
        blocks = sorted({int(m[1]) for t in table.tensors if (m := _BLOCK.match(t.name))})
        if blocks and (len(blocks) != layers or blocks[-1] != layers - 1):
            raise CheckpointFileError(
                path, f"the GGUF metadata declares {_gguf_key(table, 'num_hidden_layers')}={layers} layers, but "
                f"the tensor table holds {len(blocks)} blocks (blk.{blocks[0]} to blk.{blocks[-1]}); the header is "
                "corrupted or the file is incomplete: re-download or re-convert it",
            )
        if not blocks and layers > len(table.tensors):
            raise CheckpointFileError(
                path, f"the GGUF metadata declares {_gguf_key(table, 'num_hidden_layers')}={layers} layers, more "
                f"than the {len(table.tensors)} tensors the file holds; the header is corrupted, re-download it",
            )
    largest = max((d for t in table.tensors for d in t.shape), default=0)
    for key in _DIM_KEYS:
        value = config.get(key)
        top = max(value) if isinstance(value, list) and value else value
        if isinstance(top, int) and top > largest:
            raise CheckpointFileError(
                path, f"the GGUF metadata declares {_gguf_key(table, key)}={shown(value)}, larger than every tensor "
                f"dimension of the file (the largest is {largest}); the header is corrupted, re-download it",
            )


def _refuse_packed_path(path: str, arch: str) -> None:
    try:
        from transformers.integrations.gguf.utils import is_gguf_arch_supported
    except ImportError:
        return
    if is_gguf_arch_supported(arch):
        raise CheckpointFileError(
            path, f"GGUF architecture {shown(arch)} is loaded by transformers' packed-GGUF converter, which this "
            "toolkit does not replay yet; open the model's safetensors checkpoint instead"
        )


@functools.lru_cache(maxsize=8)
def _plan(path: str, *identity: int) -> _Plan | OwnPlan:
    """The plan of a file, kept for the same path and stat identity (size, times, inode: a rewrite misses).

    From the toolkit's own table (:class:`~toolkit.sources.gguf_names.OwnPlan`, no
    ``transformers`` import) when it covers the file, else from ``transformers``.
    """
    table = read_gguf_table(path)
    own = OwnPlan.of(table)
    if own is not None:
        check_declared_sizes(table, own.raw_config)
        return own
    return _Plan(path, table)


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
        e.g. ``rope_freqs.weight``); they get no record.

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

    def _read(self, name: str) -> torch.Tensor:
        group, _ = self._plan.outputs[name]
        if self._cache is not None and self._cache[0] == group:
            tensors = self._cache[1]
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
