"""Naming the device a computation runs on: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"``, checked before any work.

A leaf (torch and the errors only): the option checks (:mod:`toolkit.constraints`), the spectral work
(:mod:`toolkit.metrics`) and the executors all ask it.
"""

from __future__ import annotations

import torch

__all__ = ["check_device", "resolve_device"]


def resolve_device(device) -> torch.device:
    """The ``torch.device`` of a device name (``"auto"`` / None: CUDA when available, else the CPU)."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def check_device(device, *, available: bool = True, option: str = "device", where: str = "") -> torch.device:
    """The ``torch.device`` named by ``device``, checked before any work.

    Parameters
    ----------
    device : str, torch.device or None
        ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"`` (CUDA when available)
        or None (= ``"auto"``).
    available : bool, default True
        Also check that this process can use it (False for a driver that
        hands the work to Dask workers, which may have GPUs it lacks).
    option, where : str
        The option's name and the function it belongs to, for the message.

    Raises
    ------
    InvalidOptionError
        Not a str, a ``torch.device`` or None (an int would name a CUDA index
        by accident), an unknown device string, a device type other than CPU
        or CUDA, or a CUDA device this process cannot use (no CUDA build of
        torch, no GPU, or an index beyond the GPUs present).
    """
    from toolkit.errors import InvalidOptionError

    names = "'cpu', 'cuda', 'cuda:N' or 'auto'"
    if device is not None and not isinstance(device, (str, torch.device)):
        raise InvalidOptionError(option, device, f"a device name: {names}", where)
    try:
        dev = resolve_device(device)
    except (RuntimeError, TypeError) as exc:
        raise InvalidOptionError(option, device, f"a device name torch knows: {names} ({exc})", where) from None
    if dev.type not in ("cpu", "cuda"):
        raise InvalidOptionError(option, device, f"'cpu' or 'cuda' (the spectral work runs there), not {dev.type!r}",
                                 where)
    if available and dev.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA" if torch.version.cuda is None
                   else "torch sees no GPU (torch.cuda.is_available() is False)")
            raise InvalidOptionError(option, device, f"a device this process has (cuda is not available: {why}); "
                                     "pass device='cpu' (or 'auto', which picks CUDA only when it is there)", where)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InvalidOptionError(option, device, f"a device this process has (not available: "
                                     f"{torch.cuda.device_count()} GPU(s) here)", where)
    return dev
