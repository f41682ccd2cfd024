"""``SourceRequest``: where a checkpoint lives and which of its files to read, as one frozen record.

The addressing group ``source, gguf_file, revision, download`` is what every pass
and loader takes (``weight_stats``, ``cell_spectrum``, ``compare`` and
``compare_series`` for each side, ``activation_stats``, ``open_source``, the
explorer's live pass); like huggingface_hub's ``hf_hub_download`` options it
travels as one thing, checked once, instead of four keywords re-listed in every
signature and forwarded through ``**kwargs``.

>>> SourceRequest("Qwen/Qwen2.5-7B", revision="main")  # doctest: +SKIP
SourceRequest(source='Qwen/Qwen2.5-7B', gguf_file=None, revision='main', download=False)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from toolkit.constraints import Flag, Optional, Text
from toolkit.errors import InvalidOptionError, SourceTypeError

__all__ = ["ADDRESS", "SourceRequest", "check_source", "check_source_arguments"]

#: the option constraints of the address group (:mod:`toolkit.constraints`), on every front door that takes it
ADDRESS = {
    "gguf_file": Optional(Text("the name of a .gguf file in the folder or hub repo")),
    "revision": Optional(Text("a branch, tag or commit of the hub repo")),
    "download": Flag(),
}


@dataclass(frozen=True)
class SourceRequest:
    """A checkpoint's address: the source and the options that pick what to read of it.

    Parameters
    ----------
    source : str, path-like, toolkit.sources.Source or None
        Hub id, local path, URL, an opened source, or None (the embedded SmolLM2-135M GGUF).
    gguf_file : str, optional
        Name of the GGUF file inside a folder or hub repo of several.
    revision : str, optional
        Hub branch, tag or commit (hub ids only).
    download : bool, default False
        Hub ids: download the weights into the Hugging Face cache instead of reading them in place.

    Raises
    ------
    SourceTypeError
        ``source`` is not None, a str, a path-like or a Source.
    InvalidOptionError
        ``gguf_file`` / ``revision`` not None or a str, ``download`` not a bool.
    """

    source: object = None
    gguf_file: str | None = None
    revision: str | None = None
    download: bool = False

    def __post_init__(self):
        check_source_arguments(self.source, gguf_file=self.gguf_file, revision=self.revision,
                               download=self.download)

    @classmethod
    def of(cls, source=None, *, gguf_file: str | None = None, revision: str | None = None,
           download: bool = False, where: str = "toolkit.open_source") -> SourceRequest:
        """``source`` as a request: a SourceRequest as it is (with the options given here, when it leaves them
        unset), anything else with these options.

        Raises
        ------
        InvalidOptionError
            An option given both in a SourceRequest and here with another value.
        """
        if not isinstance(source, SourceRequest):
            return cls(source, gguf_file, revision, download)
        changes = {}
        for name, value, unset in (("gguf_file", gguf_file, None), ("revision", revision, None),
                                   ("download", download, False)):
            if value == unset or value == getattr(source, name):
                continue
            if getattr(source, name) != unset:
                raise InvalidOptionError(name, value, f"left out: the SourceRequest already says {name}="
                                         f"{getattr(source, name)!r}", where)
            changes[name] = value
        return replace(source, **changes) if changes else source

    @classmethod
    def from_options(cls, source, given, where: str = "toolkit.open_source") -> SourceRequest:
        """The request of ``source`` with the address options among the keyword arguments ``given``
        (``gguf_file``, ``revision``, ``download``; the others are not its)."""
        return cls.of(source, **{name: given[name] for name in ADDRESS if name in given}, where=where)

    def open(self):
        """The opened :class:`~toolkit.sources.Source` (:func:`toolkit.open_source`)."""
        from toolkit.sources import open_source

        return open_source(self)


def check_source(source) -> None:
    """Refuse, with a typed error, a ``source`` that is no checkpoint address.

    Raises
    ------
    SourceTypeError
        ``source`` is not None, a str, a path-like or a :class:`~toolkit.sources.Source` (an int, bytes, a list...),
        or a path-like whose ``__fspath__`` fails or gives bytes.
    """
    from toolkit.sources.base import Source

    if source is None or isinstance(source, (Source, SourceRequest)):
        return
    if isinstance(source, (bytes, bytearray, memoryview)):
        raise SourceTypeError(
            source, "bytes are not a path or a hub id; decode them first: open_source(os.fsdecode(data))"
        )
    if isinstance(source, (list, tuple, set, frozenset, dict)) or (
        not isinstance(source, (str, os.PathLike)) and hasattr(source, "__iter__")
    ):
        raise SourceTypeError(
            source, f"a {type(source).__name__} is not one checkpoint: open one at a time "
            "(a hub id, a path or a Source), or compare several with toolkit.compare_series([...])"
        )
    if not isinstance(source, (str, os.PathLike)):
        raise SourceTypeError(
            source, f"a {type(source).__name__} is not a checkpoint: pass a hub id ('org/name'), a local "
            "path (str or pathlib.Path), a toolkit.sources.Source, or None for the bundled model"
        )
    if isinstance(source, os.PathLike):
        try:
            text = os.fspath(source)
        except TypeError as exc:
            raise SourceTypeError(source, f"its __fspath__ fails ({exc}); pass the path as a str") from exc
        if not isinstance(text, str):
            raise SourceTypeError(source, "its path is bytes; pass it as a str: os.fsdecode(path)")


def check_source_arguments(source, *, gguf_file=None, revision=None, download=False,
                           where: str = "toolkit.open_source") -> None:
    """Refuse, with a typed error, a ``source`` / ``gguf_file`` / ``revision`` / ``download`` of the wrong type.

    Raises
    ------
    SourceTypeError
        ``source`` is no checkpoint address (:func:`check_source`).
    InvalidOptionError
        ``gguf_file`` / ``revision`` is not None or a str, or ``download`` is not a bool.
    """
    from toolkit import options

    options.flag(download, "download", where)
    check_source(source)
    for name, value, meaning in (("gguf_file", gguf_file, "the name of a .gguf file in the folder or repo"),
                                 ("revision", revision, "a branch, tag or commit of the hub repo")):
        if value is not None and not isinstance(value, str):
            raise InvalidOptionError(name, value, f"None or a str ({meaning})", where)
