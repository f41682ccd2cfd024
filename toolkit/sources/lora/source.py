"""A LoRA adapter folder as a source of ΔW, and a base model with an adapter merged in.

:class:`AdapterSource` yields one record per adapted module, named as the
base parameter it updates (``model.layers.0.self_attn.q_proj.weight``), of
the base parameter's shape; ``read()`` gives ΔW = s · B · A, and the
record's ``delta`` gives the factors (so statistics that allow it are
computed from them). The base model's ``config.json`` (its family, layer
count and fused sizes) is read from ``base=`` or the adapter's
``base_model_name_or_path`` (a local folder, or a hub id in the local
Hugging Face cache); no base weight is read.

:class:`MergedSource` is a base source whose adapted parameters read as
base + ΔW (DoRA: rescaled per row), every other tensor as the base's own.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from toolkit.errors import (
    AdapterBaseError,
    CheckpointFileError,
    CheckpointMismatchError,
    SourceNotFoundError,
    ToolkitError,
)
from toolkit.sources._common import fingerprint, read_json, shown
from toolkit.sources.base import Source, TensorRecord
from toolkit.sources.formats import CheckpointFormat, get_format
from toolkit.sources.lora.config import CONFIG_NAME, AdapterConfig
from toolkit.sources.lora.delta import DeltaRecord, LowRankDelta, merged_record

#: Weight files of an adapter folder, in the order ``peft`` loads them.
WEIGHT_NAMES = ("adapter_model.safetensors", "adapter_model.bin")
_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+?)\.(?P<part>lora_A|lora_B|lora_magnitude_vector)"
                  r"(?:\.[^.]+)?(?:\.weight)?$")


def is_adapter_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder holding ``adapter_config.json`` and an adapter weight file."""
    folder = Path(path)
    return (folder / CONFIG_NAME).is_file() and any((folder / n).is_file() for n in WEIGHT_NAMES)


def _open_weights(path: Path) -> Source:
    """The adapter's weight file as stored (its factors), through the registered format of its kind."""
    kind = "safetensors" if path.suffix == ".safetensors" else "pytorch"
    return get_format(kind).open_file(path, config={}, location=str(path))


def _cached_config(repo_id: str) -> Path | None:
    """``config.json`` of a hub repo in the local Hugging Face cache, or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - a name the hub client refuses is simply not cached
        return None
    return Path(found) if isinstance(found, str) and os.path.isfile(found) else None


def base_location(base: str) -> tuple[str, Path | None]:
    """``(where, config.json)`` of a base named by path or hub id; config None when not found locally."""
    if not base:
        return "", None
    local = Path(os.path.expanduser(base))
    if local.is_dir():
        return str(local.resolve()), (local / "config.json") if (local / "config.json").is_file() else None
    return base, _cached_config(base)


class AdapterSource(Source):
    """A PEFT LoRA adapter folder: one :class:`~toolkit.sources.lora.delta.DeltaRecord` per adapted module.

    Parameters
    ----------
    folder : path-like
        Holds ``adapter_config.json`` and ``adapter_model.safetensors`` (or ``.bin``).
    base : str, optional
        The base model (folder or hub id) whose ``config.json`` gives the
        architecture; default the adapter's ``base_model_name_or_path``.

    Attributes
    ----------
    adapter_config : AdapterConfig
    base : str
        Where the base lies (resolved folder or hub id; ``""`` if unknown).
    other_tensors : list of str
        Stored tensors that are no LoRA factor (``modules_to_save``, embedding LoRA).

    Raises
    ------
    AdapterBaseError
        The base's ``config.json`` cannot be found: no ``base=`` and no
        ``base_model_name_or_path``, or a path / hub id not on this machine.
    CheckpointFileError
        A bad adapter config (:meth:`AdapterConfig.read`), a module with only
        one factor, factors whose rank differs from the config's, factors of a
        module ``target_modules`` does not adapt, or a DoRA magnitude that is
        not one entry per output row.
    CheckpointMismatchError
        A ΔW of another shape than the base's stored parameter (checked when
        the base's weights lie beside its config; only their headers are read).

    Warns
    -----
    UserWarning
        ``fan_in_fan_out`` contradicts the type of an adapted module (an
        ``nn.Linear`` flagged, a ``Conv1D`` not): ``peft`` sets it per module
        type, and so does this source.
    """

    format = "lora"
    covers_every_layer = False  # an adapter may adapt only some layers
    measured_as_factors = True  # record.delta.factors() gives B, A and the scale of each ΔW

    def __init__(self, folder: str | os.PathLike, *, base: str | os.PathLike | None = None):
        from toolkit.config_keys import normalize_config
        from toolkit.sources._common import check_config_sizes

        folder = Path(os.path.abspath(os.path.expanduser(folder)))
        self.location = str(folder)
        self.adapter_config = cfg = AdapterConfig.read(folder)
        weights = next((folder / n for n in WEIGHT_NAMES if (folder / n).is_file()), None)
        if weights is None:
            raise SourceNotFoundError(folder, f"an adapter config but no {' or '.join(WEIGHT_NAMES)}; re-save it")
        named = os.fspath(base) if base is not None else cfg.base_model
        self.base, config_path = base_location(named)
        given = "the base= given" if base is not None else "its base_model_name_or_path"
        if self.base and os.path.isdir(self.base) and os.path.samefile(self.base, folder):
            raise AdapterBaseError(
                folder, named, f"{given} {named!r} is the adapter's own folder, which holds the adapter's factors, "
                "not the base model's weights (a config.json copied beside them does not make it a base). Pass "
                "the base model's folder or hub id: toolkit.sources.open_adapter(adapter, base='path/or/hub-id'), "
                "or toolkit.compare(base, adapter)",
            )
        if config_path is None:
            how = ("it records no base_model_name_or_path" if not named else
                   f"{given} {named!r} is a local folder without a config.json" if os.path.isdir(self.base) else
                   f"{given} {named!r} is neither a local folder nor in the Hugging Face cache")
            raise AdapterBaseError(
                folder, named, f"the base model's config.json is needed for the layers and components, and {how}. "
                "Pass the base: toolkit.weight_stats(toolkit.sources.open_adapter(adapter, base='path/or/hub-id')) "
                "or toolkit.compare(base, adapter)",
            )
        self.config = check_config_sizes(normalize_config(read_json(config_path, "config.json")), config_path)
        self._files = [str(weights), str(folder / CONFIG_NAME), str(config_path)]  # every file the numbers depend on
        self.fingerprint = fingerprint(self._files)
        self.revision = ""
        self.missing_config = ""
        self._records, self.other_tensors = self._group(_open_weights(weights))
        self._check_base_shapes(config_path)

    def _group(self, stored: Source) -> tuple[list[DeltaRecord], list[str]]:
        cfg, parts, others = self.adapter_config, {}, []
        for rec in stored.tensors():
            m = _KEY.match(rec.name)
            if m is None:
                others.append(rec.name)
                continue
            parts.setdefault(m["module"], {})[m["part"]] = rec
        records, flipped = [], []
        for module, got in parts.items():
            a, b = got.get("lora_A"), got.get("lora_B")
            if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2 or a.shape[0] != b.shape[1]:
                raise CheckpointFileError(
                    self._files[0], f"module {module!r} has lora_A {a and a.shape} and lora_B {b and b.shape}, not a "
                    "pair of shapes (r, in) and (out, r); re-save the adapter with peft",
                )
            if not cfg.targets.adapts(module):
                raise CheckpointFileError(
                    self._files[0], f"module {module!r} has LoRA factors, but the adapter config's target_modules "
                    f"{shown(cfg.targets.modules)} (with exclude_modules, layers_to_transform) does not adapt it, "
                    "so peft would not apply them; use the adapter_config.json saved with these weights",
                )
            if a.shape[0] != cfg.rank(module):
                raise CheckpointFileError(
                    self._files[0], f"module {module!r} has rank {a.shape[0]} but the adapter config gives it "
                    f"{cfg.rank(module)} (r / rank_pattern), so its scaling alpha/r is unknown; use the "
                    "adapter_config.json saved with these weights",
                )
            mag = got.get("lora_magnitude_vector")
            if cfg.use_dora and (mag is None or tuple(mag.shape) != (b.shape[0],)):
                raise CheckpointFileError(
                    self._files[0], f"use_dora is set but {module!r} has " + (
                        "no magnitude vector" if mag is None else f"a magnitude vector {mag.name!r} of shape "
                        f"{tuple(mag.shape)}, not ({b.shape[0]},), one per output row of lora_B (peft refuses it)")
                    + "; re-save the adapter with peft",
                )
            transposed = self._stored_transposed(module)
            if transposed != cfg.fan_in_fan_out:
                flipped.append(module)
            delta = LowRankDelta(module, a.read, b.read, cfg.scale(module), transposed,
                                 mag.read if cfg.use_dora else None, self.location)
            out, inp = b.shape[0], a.shape[1]
            shape = (inp, out) if transposed else (out, inp)
            records.append(DeltaRecord(f"{module}.weight", shape, a.dtype, lambda d=delta: d.factors().dense(),
                                       file=a.file, stored_name=a.name, delta=delta))
        if not records:
            raise CheckpointFileError(self._files[0], "no lora_A / lora_B factors in the adapter: not a LoRA adapter?")
        if flipped:
            kind = "an nn.Linear" if cfg.fan_in_fan_out else "a Conv1D"
            warnings.warn(
                f"{self._files[1]}: fan_in_fan_out is {cfg.fan_in_fan_out} but {flipped[0]!r}"
                f"{f' (and {len(flipped) - 1} more)' if len(flipped) > 1 else ''} is {kind} of the base model; "
                f"peft sets fan_in_fan_out to {not cfg.fan_in_fan_out} for it, and so does the toolkit",
                UserWarning, stacklevel=4)
        return records, others

    def _stored_transposed(self, module: str) -> bool:
        """Whether the base stores ``module``'s weight (in, out): peft's rule per module type (a ``Conv1D``
        is, an ``nn.Linear`` is not) from the base family's declaration; the config's ``fan_in_fan_out``
        for a module the family does not declare."""
        from toolkit.architectures.orientation import stored_transposed

        known = stored_transposed(self.config, f"{module}.weight")
        return self.adapter_config.fan_in_fan_out if known is None else known

    def _check_base_shapes(self, config_path: Path) -> None:
        """Check each ΔW against the base's stored parameter, when the base's weights lie beside its config
        (their headers only are read; nothing is checked when only the config is on this machine).

        Raises
        ------
        CheckpointMismatchError
            An adapted module the base lacks, or of another shape.
        """
        from toolkit.sources import open_source

        folder = config_path.parent
        if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
            return
        try:
            base = open_source(folder)
        except ToolkitError:
            return  # the base cannot be opened here: compare(base, adapter) will say why
        check_against_base({r.name: r for r in base.tensors()}, self._records, self.base or str(folder))

    def tensors(self):
        """One :class:`DeltaRecord` per adapted module, reading nothing."""
        yield from self._records

    def files(self) -> list[str]:
        return list(self._files)

    def check_standalone(self) -> None:
        """Refuse a DoRA adapter: its update cannot be measured without the base weights.

        Raises
        ------
        AdapterBaseError
            ``use_dora`` is set.
        """
        cfg = self.adapter_config
        if cfg.use_dora:
            raise AdapterBaseError(
                self.location, cfg.base_model, "a DoRA adapter (use_dora) rescales each row of base + s*B*A by its "
                "stored magnitude, so its update cannot be measured without the base weights. Compare it with its "
                "base: toolkit.compare(base, adapter), or toolkit.compare(adapter) to open the recorded base",
            )

    def merged_into(self, base: Source) -> MergedSource:
        """``base`` with this adapter merged in (:class:`MergedSource`; see it for what it raises)."""
        return MergedSource(base, self)

    def extra_attrs(self) -> dict:
        """The base's quantisation (if any) and the adapter's rank, alpha, base... (:meth:`adapter_attrs`)."""
        return {**super().extra_attrs(), **self.adapter_attrs()}

    def adapter_attrs(self) -> dict:
        """NetCDF-safe Dataset attrs describing the adapter."""
        cfg = self.adapter_config
        return {"adapter": cfg.method(), "lora_rank": int(cfg.r), "lora_alpha": float(cfg.lora_alpha),
                "lora_rank_pattern": str(cfg.rank_pattern or ""), "lora_alpha_pattern": str(cfg.alpha_pattern or ""),
                "base_model": self.base, "adapted_modules": len(self._records),
                "adapter_other_tensors": ", ".join(self.other_tensors)}


class MergedSource(Source):
    """``base`` with ``adapter`` merged in: adapted parameters read as base + ΔW, others as the base's.

    Raises
    ------
    CheckpointMismatchError
        An adapted module the base lacks, or of another shape.
    CheckpointFileError
        The adapter stores tensors that are no LoRA factor (``modules_to_save``,
        embedding LoRA): they would replace base tensors, which is not done here.
    """

    def __init__(self, base: Source, adapter: AdapterSource):
        from toolkit.hashing import digest

        if adapter.other_tensors:
            raise CheckpointFileError(
                adapter.location, f"the adapter also stores {len(adapter.other_tensors)} tensor(s) that are no LoRA "
                f"factor (first: {adapter.other_tensors[0]!r}: modules_to_save or embedding LoRA); they are not "
                "merged here. Merge with peft (merge_and_unload), save the model and compare that",
            )
        self.base_source, self.adapter = base, adapter
        self.location = adapter.location
        self.format = f"{base.format}+lora"
        self.config = base.config
        self.fingerprint = digest(base.fingerprint, adapter.fingerprint)
        self.revision = base.revision
        self.missing_config = base.missing_config
        base_records = {r.name: r for r in base.tensors()}
        deltas = {r.name: r for r in adapter.tensors()}
        check_against_base(base_records, deltas.values(), base.location)
        warn_other_base(base, adapter)
        self._by_name = {n: merged_record(r, deltas[n].delta) if n in deltas else r for n, r in base_records.items()}

    def record_for(self, base: TensorRecord) -> TensorRecord:
        """The merged record of the base record ``base``."""
        return self._by_name[base.name]

    def tensors(self):
        yield from self._by_name.values()

    def files(self) -> list[str]:
        return [*self.base_source.files(), *self.adapter.files()]

    def extra_attrs(self) -> dict:
        """The base's quantisation (if any) and the adapter's attrs."""
        return {**super().extra_attrs(), **self.adapter_attrs()}

    def decoder_versions(self) -> str:
        """The base's: the merged values are decoded from its bytes (the update is exact arithmetic)."""
        return self.base_source.decoder_versions()

    def check_unchanged(self) -> None:
        """Both the base's and the adapter's files (:meth:`Source.check_unchanged`)."""
        self.base_source.check_unchanged()
        self.adapter.check_unchanged()

    def adapter_attrs(self) -> dict:
        """NetCDF-safe Dataset attrs describing the adapter merged in."""
        return self.adapter.adapter_attrs()


def check_against_base(base_records: dict, deltas, base: str) -> None:
    """Check that every ΔW record updates a parameter of the base of its own shape.

    Parameters
    ----------
    base_records : dict of str -> TensorRecord
        The base's records by name.
    deltas : iterable of DeltaRecord
    base : str
        Where the base lies (for the message).

    Raises
    ------
    CheckpointMismatchError
        An adapted module the base lacks, or of another shape.
    """
    for d in deltas:
        b = base_records.get(d.name)
        if b is None or tuple(b.shape) != tuple(d.shape):
            raise CheckpointMismatchError(
                d.name, "absent" if b is None else f"shape {tuple(b.shape)}", f"shape {tuple(d.shape)}",
                f"the adapter updates a module the base {'lacks' if b is None else 'has in another shape'}; "
                f"is {base!r} the adapter's base model?",
            )


def _same_place(a: str, b: str) -> bool:
    """Whether two bases (paths or hub ids) name the same checkpoint: equal hub ids, the same folder, or a
    folder of the hub cache's snapshots of that hub id."""
    if a == b:
        return True
    real = [os.path.realpath(os.path.expanduser(x)) if os.path.isdir(os.path.expanduser(x)) else None for x in (a, b)]
    if None not in real:
        return real[0] == real[1]
    path, repo = (real[0], b) if real[0] is not None else (real[1], a)
    return path is not None and f"models--{repo.replace('/', '--')}" in Path(path).parts


def warn_other_base(base: Source, adapter: AdapterSource) -> None:
    """Warn when ``base`` is not the base the adapter records (or was opened with).

    An adapter trained on one model and merged into another gives numbers of
    neither; ``peft`` loads it into any model of the right shapes without a
    word. Nothing is said when the adapter records no base.
    """
    recorded = adapter.base
    if not recorded or _same_place(str(base.location), recorded):
        return
    warnings.warn(
        f"the LoRA adapter {adapter.location!r} records the base {recorded!r}, but it is merged into "
        f"{base.location!r}: its update was trained on the other weights. If {base.location!r} is that base "
        f"(a copy of it), say so: toolkit.compare(base, toolkit.sources.open_adapter(adapter, base=base))",
        UserWarning, stacklevel=3)


class AdapterFormat(CheckpointFormat):
    """The registry entry of PEFT LoRA adapter folders (:mod:`toolkit.sources.formats`)."""

    name = "lora"
    description = "a PEFT LoRA adapter folder: adapter_config.json and adapter_model.safetensors (or .bin)"

    def guess_can_open(self, path: Path, **options) -> bool:
        """A folder holding ``adapter_config.json`` and an adapter weight file (:func:`is_adapter_folder`)."""
        return path.is_dir() and is_adapter_folder(path)

    def open(self, path: Path, *, location: str | None = None, revision: str = "", **options) -> AdapterSource:
        """The adapter, its architecture from its recorded base (see :class:`AdapterSource` for what it raises)."""
        return AdapterSource(path)
