"""Running library code on a GGUF file's bytes, and the typed errors when it fails.

:func:`dequantise` turns one stored tensor into values with ``gguf.dequantize``;
:func:`model_code` turns an error of ``transformers``' code run on a file's
metadata (config classes, tensor processors, model constructors) into a
:class:`~toolkit.errors.CheckpointFileError` naming the file. Both GGUF plans
(:mod:`toolkit.sources.gguf.own_plan`, :mod:`toolkit.sources.gguf.transformers_plan`)
read through here, so a file fails the same way on either.
"""

from __future__ import annotations

import contextlib

import numpy as np

from toolkit.errors import CheckpointFileError, ToolkitError
from toolkit.sources.gguf.table import GGUFTensorInfo, tensor_data

#: What ``transformers``' model code, processors and config classes raise on sizes that cannot work.
#: (``ValueError``, ``ZeroDivisionError``, ``huggingface_hub``'s ``StrictDataclassClassValidationError`` of a
#: config class...: too many kinds to list; a ``MemoryError`` is let through, see :data:`LET_THROUGH`.)
MODEL_CODE_ERRORS = (Exception,)
#: Never turned into a :class:`CheckpointFileError`: ours already, or no statement about the file.
LET_THROUGH = (ToolkitError, MemoryError)  # ToolkitError: a remote read's typed errors too


def dequantise_error(path: str, info, exc: BaseException) -> BaseException:
    """The error to raise when ``gguf.dequantize`` fails on a stored tensor (``exc`` itself when let through)."""
    if isinstance(exc, LET_THROUGH):
        return exc
    if isinstance(exc, NotImplementedError):
        return CheckpointFileError(path, f"tensor {info.name!r}: {exc}")
    return CheckpointFileError(
        path, f"tensor {info.name!r} (shape {info.shape}, {info.type_name}) cannot be dequantised "
        f"({type(exc).__name__}: {one_line(exc, 200)}); re-download or re-convert the file",
    )


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message on one line, shortened (messages are printed on one line)."""
    return " ".join(str(exc).split())[:limit]


@contextlib.contextmanager
def model_code(path: str, what: str):
    """Turn an error of ``transformers``' code run on this file's metadata into a :class:`CheckpointFileError`.

    Parameters
    ----------
    path : str
        The file, named in the message.
    what : str
        What failed, in words (the start of the message).

    Raises
    ------
    CheckpointFileError
        For any error of the code run inside but :data:`LET_THROUGH`.
    """
    try:
        yield
    except LET_THROUGH:
        raise
    except MODEL_CODE_ERRORS as exc:
        raise CheckpointFileError(
            path, f"{what} ({type(exc).__name__}: {one_line(exc)}); the metadata or the tensor table is "
            "corrupted or from another model: re-download or re-convert the file",
        ) from exc


def dequantise(info: GGUFTensorInfo, path: str) -> np.ndarray:
    """The values of one stored tensor, dequantised by ``gguf.dequantize`` (reads its bytes now).

    Parameters
    ----------
    info : GGUFTensorInfo
        The tensor's entry in the file's table.
    path : str
        The ``.gguf`` file.

    Returns
    -------
    numpy.ndarray
        float32 for quantised types, the stored dtype for float ones; the
        logical shape as ``gguf.GGUFReader`` gives it (dims reversed from the file's).

    Raises
    ------
    CheckpointFileError
        The bytes cannot be read (truncated file) or dequantised (an unknown
        or damaged quantisation), naming the tensor.
    """
    from gguf import dequantize

    try:
        return dequantize(tensor_data(info, path), info.ggml_type)
    except MODEL_CODE_ERRORS as exc:
        raise dequantise_error(path, info, exc) from exc

