"""The registry of checkpoint formats, in the manner of xarray's backends.

A format is one small class (:class:`CheckpointFormat`): a ``name``, a
:meth:`~CheckpointFormat.guess_can_open` that says from a path alone whether
the format reads it, and an :meth:`~CheckpointFormat.open` that returns the
:class:`~toolkit.sources.Source`. :func:`toolkit.open_source` on a local path
asks the registered formats in order (:func:`guess_format`) and opens with the
first that says yes. Adding a format is one module holding its class and one
registration line::

    class NpzFormat(CheckpointFormat):
        name = "npz"

        def guess_can_open(self, path, **options):
            return path.suffix == ".npz" or (path / "model.npz").is_file()

        def open(self, path, *, location=None, revision="", **options):
            return NpzSource(path, location=location)

    register_format(NpzFormat)

in :mod:`toolkit.sources.builtin_formats` for a format of the toolkit, in
the user's own code for theirs, or as an entry point of the group
``toolkit.formats`` in a package's metadata (``[project.entry-points."toolkit.formats"]
npz = "mypkg.formats:NpzFormat"``), found by :func:`list_formats`.

Order matters on a folder: the built-ins are tried as
:mod:`~toolkit.sources.builtin_formats` registers them (safetensors, PyTorch
``.bin``, LoRA adapter, GGUF), then the formats registered later, then those of
entry points. A keyword of :func:`~toolkit.open_source` that a format declares
in ``open_parameters`` (GGUF's ``gguf_file``) puts the formats declaring it first.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

from toolkit.constraint_types import Exempt
from toolkit.constraints import Flag, checks_options
from toolkit.errors import DuplicateRegistrationError, ToolkitError, UnknownFormatError

__all__ = ["ENTRY_POINT_GROUP", "CheckpointFormat", "decoder_versions", "get_format", "guess_format",
           "library_versions", "list_formats", "refresh_formats", "register_format", "unregister_format"]

#: The entry-point group other packages register formats under (name = the format's name).
ENTRY_POINT_GROUP = "toolkit.formats"


class CheckpointFormat:
    """The contract of one checkpoint format: recognise a path, open it.

    Subclass, set :attr:`name` (and what else applies), implement
    :meth:`guess_can_open` and :meth:`open`, and register the class with
    :func:`register_format`.

    Attributes
    ----------
    name : str
        The format's name, the ``format`` of the sources it opens
        (``"safetensors"``, ``"gguf"``...).
    description : str
        One line for listings.
    open_parameters : tuple of str
        Keywords of :func:`~toolkit.open_source` beyond ``location`` and
        ``revision`` this format takes (GGUF: ``("gguf_file",)``); they are
        passed to :meth:`open` when given, and a format declaring one that is
        given is asked before the others.
    decoders : tuple of str
        Distributions whose versions decide the values read from the bytes
        (GGUF: ``("gguf", "transformers")``); empty for a format read bit for bit.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    open_parameters: ClassVar[tuple[str, ...]] = ()
    decoders: ClassVar[tuple[str, ...]] = ()

    def guess_can_open(self, path: Path, **options) -> bool:
        """Whether this format reads ``path``, judged from names and the folder's listing (no file is parsed).

        Parameters
        ----------
        path : pathlib.Path
            An existing file or folder, absolute.
        **options
            The keywords given to :func:`~toolkit.open_source` (``gguf_file``), for
            formats that declare them.

        Returns
        -------
        bool
        """
        raise NotImplementedError

    def open(self, path: Path, *, location: str | None = None, revision: str = "", **options):
        """Open ``path`` as a :class:`~toolkit.sources.Source` of this format.

        Parameters
        ----------
        path : pathlib.Path
            An existing file or folder, absolute, for which :meth:`guess_can_open` said yes.
        location : str, optional
            What the source shows as its ``location`` (a hub id for a hub
            download); default the path.
        revision : str, default ""
            Hub commit, when the files came from the hub.
        **options
            The keywords of :attr:`open_parameters` that were given.

        Returns
        -------
        Source
            Its ``format`` is :attr:`name`.

        Raises
        ------
        ToolkitError
            A typed error (:class:`~toolkit.errors.CheckpointFileError`,
            :class:`~toolkit.errors.SourceNotFoundError`...) naming the path.
        """
        raise NotImplementedError

    def decoder_versions(self) -> str:
        """``"name=version,..."`` of :attr:`decoders` (``"name=?"`` for one not installed); ``""`` when none."""
        return library_versions(self.decoders)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


_REGISTERED: dict[str, CheckpointFormat] = {}


@checks_options(fmt=Exempt("a CheckpointFormat definition, checked by the registry (TypeError, "
                        "DuplicateRegistrationError)"), overwrite=Flag())
def register_format(fmt, *, overwrite: bool = False) -> CheckpointFormat:
    """Register a checkpoint format, after those registered before it.

    Parameters
    ----------
    fmt : CheckpointFormat subclass or instance
        A class is instantiated with no arguments.
    overwrite : bool, default False
        Replace a format registered under the same name (it keeps its place in
        the order). Registering the same class again (same module and
        qualified name) is always allowed.

    Returns
    -------
    CheckpointFormat
        The registered instance.

    Raises
    ------
    DuplicateRegistrationError
        A format of that name is registered and ``overwrite`` is False.
    ToolkitError
        ``fmt`` is no :class:`CheckpointFormat`, or its ``name`` is empty.
    """
    if isinstance(fmt, type) and issubclass(fmt, CheckpointFormat):
        fmt = fmt()
    if not isinstance(fmt, CheckpointFormat):
        raise ToolkitError(f"register_format takes a CheckpointFormat subclass or instance, not {fmt!r}")
    if not isinstance(fmt.name, str) or not fmt.name:
        raise ToolkitError(f"a checkpoint format needs a name (the format of its sources); {fmt!r} has none")
    old = _REGISTERED.get(fmt.name)
    same = old is not None and (type(old).__module__, type(old).__qualname__) == (
        type(fmt).__module__, type(fmt).__qualname__)  # the same class, e.g. after importlib.reload
    if old is not None and not overwrite and not same:
        raise DuplicateRegistrationError("format", fmt.name, old,
                                         f"by {type(old).__module__}.{type(old).__qualname__}")
    _REGISTERED[fmt.name] = fmt
    list_formats.cache_clear()
    return fmt


def unregister_format(name: str) -> None:
    """Remove a registered format (mainly for tests and notebooks); nothing happens for an unknown name."""
    _REGISTERED.pop(name, None)
    list_formats.cache_clear()


@functools.cache
def _entry_point_formats() -> tuple[tuple[str, CheckpointFormat], ...]:
    """The formats of the ``toolkit.formats`` entry points, by name (one that fails to load: left out, warned)."""
    from importlib.metadata import entry_points

    found = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
            fmt = obj() if isinstance(obj, type) else obj
            if not isinstance(fmt, CheckpointFormat):
                raise TypeError(f"{ep.value} is no CheckpointFormat")
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the built-in formats
            warnings.warn(f"checkpoint format entry point {ep.name!r} ({ep.value}) is left out: "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
            continue
        found.append((ep.name, fmt))
    return tuple(found)


@functools.cache
def list_formats() -> Mapping[str, CheckpointFormat]:
    """The registered formats, ``{name: format}``, in the order they are tried (read-only, cached).

    The formats registered with :func:`register_format` (the built-ins
    first), then those of the ``toolkit.formats`` entry points, by name (loaded
    on the first call; :func:`refresh_formats` looks again); an entry point
    whose name is registered already is left out with a warning.

    Returns
    -------
    mapping of str -> CheckpointFormat
    """
    formats = dict(_REGISTERED)
    for name, fmt in _entry_point_formats():
        if name in formats:
            warnings.warn(f"checkpoint format entry point {name!r} is left out: a format of that name is "
                          "registered already", RuntimeWarning, stacklevel=2)
            continue
        formats[name] = fmt
    return MappingProxyType(formats)


def refresh_formats() -> None:
    """Forget the cached :func:`list_formats`, entry points included (after installing a package
    that declares ``toolkit.formats`` entry points, in a running session)."""
    _entry_point_formats.cache_clear()
    list_formats.cache_clear()


def get_format(name: str) -> CheckpointFormat:
    """The registered format ``name``.

    Raises
    ------
    UnknownFormatError
        No format of that name (the message lists the registered ones).
    """
    formats = list_formats()
    try:
        return formats[name]
    except (KeyError, TypeError):
        raise UnknownFormatError(name, formats) from None


def guess_format(path: Path, **options) -> CheckpointFormat | None:
    """The first registered format whose :meth:`~CheckpointFormat.guess_can_open` says yes to ``path``.

    Parameters
    ----------
    path : pathlib.Path
        An existing file or folder, absolute.
    **options
        Keywords of :func:`~toolkit.open_source` that were given (not None):
        the formats declaring one of them in ``open_parameters`` are asked first.

    Returns
    -------
    CheckpointFormat or None
        None when no format reads ``path``.
    """
    formats = list(list_formats().values())
    named = [f for f in formats if set(options) & set(f.open_parameters)]
    for fmt in named + [f for f in formats if f not in named]:
        if fmt.guess_can_open(path, **options):
            return fmt
    return None


def library_versions(names) -> str:
    """``"name=version,..."`` of installed distributions, ``"name=?"`` for one not installed; ``""`` for none.

    Parameters
    ----------
    names : iterable of str
        Distribution names (``"gguf"``, ``"transformers"``).
    """
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in names:
        try:
            found.append(f"{name}={version(name)}")
        except PackageNotFoundError:
            found.append(f"{name}=?")
    return ",".join(found)


def decoder_versions() -> str:
    """The decoder versions of every registered format that has decoders, together.

    What the numbers of any source may depend on beyond its bytes and the
    toolkit's code (a plan cache shared by all formats keys on it).

    Returns
    -------
    str
        ``"gguf:gguf=0.17.1,transformers=5.0.0"`` (formats joined by ``";"``),
        ``""`` when no registered format has decoders.
    """
    return ";".join(f"{name}:{versions}" for name, fmt in list_formats().items()
                    if (versions := fmt.decoder_versions()))
