"""The ``transformers``-backed plan of a GGUF file: names, config and processing as ``transformers`` loads it.

``transformers`` loads a GGUF checkpoint by (1) deriving a config from the
metadata, (2) building a GGUF-name -> parameter-name map from a model
instance (``get_gguf_hf_weights_map``), (3) dequantising every tensor with
``gguf.dequantize`` and (4) passing it through a per-architecture
``TensorProcessor`` (llama's q/k un-permutation, gemma's ``norm - 1``,
MoE expert merges...). This module runs the same functions, one stored
tensor at a time: the config comes from the header read once by
:func:`~toolkit.sources.gguf.table.read_gguf_table` (:func:`gguf_config`),
the map from a model built on the ``meta`` device (no weights), and which
parameters each stored tensor feeds is learnt by running the processor on a
zero-stride placeholder array (no file data).
"""

from __future__ import annotations

import numpy as np
import torch

from toolkit.errors import CheckpointFileError
from toolkit.sources._common import shown
from toolkit.sources.gguf.decoding import LET_THROUGH, MODEL_CODE_ERRORS, dequantise, model_code, one_line
from toolkit.sources.gguf.sizes import check_declared_sizes
from toolkit.sources.gguf.table import GGUFTable, metadata_length, metadata_value, read_gguf_table


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
    except MODEL_CODE_ERRORS as exc:
        if isinstance(exc, LET_THROUGH):
            raise
        import transformers

        raise CheckpointFileError(
            path, f"transformers {transformers.__version__} cannot read GGUF architecture {shown(architecture)} "
            f"({one_line(exc)}); use the model's safetensors checkpoint instead, or upgrade transformers"
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
    architecture = metadata_value(meta["general.architecture"])
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
        value = metadata_value(raw)
        if isinstance(value, str) and architecture in value:
            value = value.replace(architecture, updated)
        config[renamed] = value
    if config.get("model_type") == "gemma3":  # the GGUF holds the text backbone only
        config["model_type"] = "gemma3_text"
    if "vocab_size" not in config and tokens is not None:  # from the token list, as transformers does
        config["vocab_size"] = metadata_length(tokens)
    return config


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

    with model_code(path, "transformers refuses the config its metadata gives"):
        cfg = AutoConfig.for_model(**config)
    named = [getattr(transformers, a, None) for a in (cfg.architectures or [])]
    autos = [transformers.AutoModelForCausalLM, transformers.AutoModelForSeq2SeqLM, transformers.AutoModel]
    errors = []
    with torch.device("meta"):
        for cls in [c for c in named if c is not None] + autos:
            try:
                return cls.from_config(cfg) if cls in autos else cls(cfg)
            except MODEL_CODE_ERRORS as exc:
                if isinstance(exc, LET_THROUGH):
                    raise
                errors.append(f"{cls.__name__}: {type(exc).__name__}: {one_line(exc, 200)}")
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


class TransformersPlan:
    """What ``transformers`` does with each stored tensor of one GGUF file, learnt from ``transformers``.

    Attributes
    ----------
    table : GGUFTable
        The file's header.
    raw_config : dict
        The config ``transformers`` derives from the metadata (:func:`gguf_config`).
    dropped : list of str
        Stored tensors no parameter is filled from.
    outputs : dict of str -> (int, tuple of int)
        Parameter name -> (its group, its shape).
    groups : dict of int -> list of int
        Group -> the stored tensors (indices into ``table.tensors``) read together.

    Raises
    ------
    CheckpointFileError
        An architecture ``transformers`` packs (not replayed here), sizes the
        table contradicts, or a model ``transformers`` cannot build from the metadata.
    """

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
        with model_code(path, "cannot build the model its metadata describes"):
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
            with model_code(path, f"tensor {info.name!r} (shape {info.shape}) does not fit the model its metadata "
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
        parsed: dict = {"tensors": {}}
        for i in self.groups[group]:
            info = self.table.tensors[i]
            weights = dequantise(info, self.table.path)
            with model_code(self.table.path, f"tensor {info.name!r} cannot be processed"):
                self._process(weights, info.name, parsed)
        return parsed["tensors"]


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
