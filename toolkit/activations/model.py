"""Loading a model (and its tokenizer) with ``transformers`` for a forward pass.

Activation statistics need the model built, unlike the weight statistics,
which stream tensors from the file. ``source`` is what
:func:`toolkit.open_source` takes (nothing = the embedded SmolLM2 GGUF, a
local folder or file, a hub id, a :class:`~toolkit.sources.Source`) or an
already loaded ``transformers`` model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from toolkit.errors import CheckpointFileError, MissingWeightsError, SourceNotFoundError, ToolkitError


@dataclass
class Loaded:
    """A model ready to run, its tokenizer (or None) and where it came from."""

    model: torch.nn.Module
    tokenizer: object
    attrs: dict = field(default_factory=dict)
    tokenizer_error: str = ""


def _locate(source, gguf_file):
    """``(folder or hub id, gguf_file, format, display name)``."""
    from toolkit.sources.base import Source

    if isinstance(source, Source):
        source = source.location
    if source is None:
        from toolkit.bundled import default_model_path

        source = default_model_path()
    text = os.path.expanduser(os.fspath(source))
    if not text.strip():
        raise SourceNotFoundError(text, "an empty path; pass the checkpoint's folder, a .gguf file, a hub id, "
                                  "or None for the bundled model")
    if text.strip() != text and not os.path.exists(text):
        raise SourceNotFoundError(text, "it has leading or trailing whitespace (a newline read from a file?); "
                                  f"pass it stripped: {text.strip()!r}")
    path = Path(text)
    if path.is_file():
        if path.suffix == ".gguf":
            return str(path.parent), path.name, "gguf", str(path)
        if path.suffix not in (".json", ".safetensors", ".bin", ".pt", ".pth"):
            raise SourceNotFoundError(text, "a file that is neither a .gguf model nor a file of a checkpoint "
                                      "folder; pass the folder that holds config.json and the weights, or a .gguf")
        return str(path.parent), gguf_file, "transformers", str(path)
    if path.is_dir():
        return str(path), gguf_file, "gguf" if gguf_file else "transformers", str(path)
    if os.path.isabs(text) or text.startswith(".") or text.count("/") != 1:
        raise SourceNotFoundError(text, "no such file or directory (and not a hub id of the form 'org/name')")
    return text, gguf_file, "gguf" if gguf_file else "transformers", text


def _model_class(config):
    import transformers as tf
    from transformers.models.auto import modeling_auto as ma

    mt = config.model_type
    if mt in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return tf.AutoModelForCausalLM
    if mt in ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return tf.AutoModelForImageTextToText
    if mt in ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return tf.AutoModelForMaskedLM
    return tf.AutoModel


def _load_local_gguf(path: Path, dtype) -> torch.nn.Module | None:
    """A GGUF file's model, built from :func:`toolkit.open_source`'s tensors (None: use ``from_pretrained``).

    ``from_pretrained(folder, gguf_file=...)`` parses the file's metadata
    several times (about 25 s of CPU for the embedded 135M model); the
    source parses it once and yields the same values (dequantised, q/k
    un-permuted as ``transformers`` does), so this takes about 9 s. Any
    parameter the file does not fill, other than a weight tied to one it
    does fill, sends the caller back to ``from_pretrained``.
    """
    import transformers as tf

    from toolkit.sources import open_source

    try:
        src = open_source(path)
        config = tf.AutoConfig.for_model(**src.config)
        model = _model_class(config).from_config(config, dtype=dtype, attn_implementation="eager")
        state = {r.name: r.read() for r in src.tensors()}
        result = model.load_state_dict(state, strict=False)
        model.tie_weights()
    except (ToolkitError, ValueError, KeyError, TypeError, RuntimeError):
        return None
    params = dict(model.named_parameters(remove_duplicate=False))
    filled = {id(params[n]) for n in state if n in params}
    if result.unexpected_keys or any(id(params.get(n)) not in filled for n in result.missing_keys):
        return None
    return model


def _checked_config(where: str, shown: str, kw: dict):
    """``transformers``' config of a checkpoint, checked before any model is built from it.

    Raises
    ------
    CheckpointFileError
        ``transformers``' config class refuses a value (``huggingface_hub``'s strict dataclass validation:
        a ``mlp_only_layers`` that is a string...), or the family's own checks
        (:meth:`toolkit.architectures.base.Adapter.config_problems`: a mixture-of-experts config routing
        more experts per token than it has, a ``decoder_sparse_step`` of 0...) find the config unusable.
    """
    import transformers as tf

    from toolkit.architectures.adapter import family_adapter

    try:
        config = tf.AutoConfig.from_pretrained(where, **kw)
    except (OSError, ValueError):
        raise
    except Exception as err:  # noqa: BLE001 - transformers' config classes validate with several error types
        raise CheckpointFileError(shown, f"transformers refuses its config ({type(err).__name__}: "
                                  f"{' '.join(str(err).split())[:300]}); fix config.json") from err
    cls = family_adapter(config.model_type)
    if cls is not None:
        try:
            problems = cls(config.to_dict()).config_problems()
        except ToolkitError as err:
            problems = [str(err)]
        if problems:
            raise CheckpointFileError(shown, f"its config cannot build a working model: {'; '.join(problems)}; fix "
                                      "config.json (or use the one published with these weights)")
    return config


def load_model(source=None, *, tokenizer=None, gguf_file=None, revision=None, dtype=torch.float32) -> Loaded:
    """Build the model with ``transformers`` (eager attention, eval mode, CPU).

    Parameters
    ----------
    source : str, path-like, Source, transformers model, Loaded or None
        As :func:`toolkit.activations.activation_stats` takes it; a
        :class:`Loaded` is returned as is (load once, run many times).
    tokenizer : transformers tokenizer, optional
        Used instead of loading one.
    gguf_file : str, optional
        File name inside a folder or hub repo of GGUF files.
    revision : str, optional
        Hub revision.
    dtype : torch.dtype
        Weights are loaded (and GGUF dequantised) to this dtype; default float32.

    Returns
    -------
    Loaded

    Raises
    ------
    SourceNotFoundError
        Nothing to load at ``source``, or ``transformers`` cannot load it.
    SourceTypeError
        ``source`` of a type no checkpoint has (an int, bytes, a list...), or
        ``gguf_file`` / ``revision`` not a str.
    CheckpointFileError
        A config ``transformers`` refuses, or one whose mixture-of-experts settings cannot run
        (checked before the model is built).
    MissingWeightsError
        Weights of the model the checkpoint lacks (``transformers`` would initialise them at random);
        the message lists the missing and the unexpected keys. (Stored weights of another shape than
        the config gives: a :class:`CheckpointFileError`.)

    Notes
    -----
    A local ``.gguf`` file is built from :func:`toolkit.open_source`'s
    tensors (the values ``from_pretrained`` loads, in a third of the time)
    and its tokenizer read with ``TokenizersBackend.from_pretrained``
    (the tokenizer ``AutoTokenizer`` builds from a GGUF file, without its
    second parse of the config).
    """
    if isinstance(source, Loaded):
        if tokenizer is None:
            return source
        return Loaded(source.model, tokenizer, dict(source.attrs))
    if isinstance(source, torch.nn.Module):
        cfg = getattr(source, "config", None)
        name = str(getattr(cfg, "_name_or_path", "") or type(source).__name__)
        return Loaded(source, tokenizer, {"source": name, "format": "loaded model"},
                      "" if tokenizer is not None else "a loaded model was given without tokenizer=")
    import transformers as tf

    from toolkit.sources import check_source_arguments

    check_source_arguments(source, gguf_file=gguf_file, revision=revision)
    where, gguf, fmt, shown = _locate(source, gguf_file)
    kw = {k: v for k, v in (("gguf_file", gguf), ("revision", revision)) if v}
    local_gguf = Path(where, gguf) if gguf and Path(where, gguf).is_file() else None
    model = _load_local_gguf(local_gguf, dtype) if local_gguf is not None else None
    try:
        if model is None:
            config = _checked_config(where, shown, kw)
            cls = _model_class(config)
            model, info = cls.from_pretrained(where, dtype=dtype, attn_implementation="eager",
                                              output_loading_info=True, **kw)
            if info.get("missing_keys") and cls is not tf.AutoModel:
                # a head-less checkpoint (a sentence-transformers BertModel): the base model may take it whole
                base, base_info = tf.AutoModel.from_pretrained(where, dtype=dtype, attn_implementation="eager",
                                                               output_loading_info=True, **kw)
                if not base_info.get("missing_keys"):
                    model, info = base, base_info
            if info.get("missing_keys"):
                raise MissingWeightsError(shown, sorted(info["missing_keys"]), sorted(info.get("unexpected_keys", ())))
    except (OSError, ValueError) as err:
        if isinstance(err, ToolkitError):
            raise
        raise SourceNotFoundError(shown, f"transformers cannot load it: {err}") from err
    except RuntimeError as err:  # transformers 5: a stored tensor of another shape than the config gives
        raise CheckpointFileError(shown, f"transformers cannot load its weights into the model its config "
                                  f"describes ({' '.join(str(err).split())[:300]}); does config.json belong to "
                                  "these weights?") from err
    model.eval()
    error = ""
    if tokenizer is None:
        try:
            if local_gguf is not None:  # the GGUF tokenizer alone, without re-parsing the config
                tokenizer = tf.TokenizersBackend.from_pretrained(where, **kw)
            else:
                tokenizer = tf.AutoTokenizer.from_pretrained(where, **kw)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
            tokenizer, error = None, f"no tokenizer could be loaded ({type(err).__name__}: {str(err)[:200]})"
    attrs = {"source": shown, "format": fmt, "revision": revision or ""}
    return Loaded(model, tokenizer, attrs, error)
