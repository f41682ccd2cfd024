"""Hub ids (``"Qwen/Qwen2.5-7B"``): the local HF cache, else read in place over HTTP, or downloaded.

Online, the revision is resolved to a commit and the repo listed; a commit
whose weight files are all cached is read from the cache, safetensors and GGUF
weights that are not are read in place by range requests (:mod:`toolkit.sources.remote`),
and other weights are downloaded, only what they need: ``config.json`` and one
copy of the weights (the ``.bin`` index and its shards or ``pytorch_model.bin``,
or a LoRA adapter). ``download=True`` downloads all of them.
Offline (``HF_HUB_OFFLINE=1``), or when the hub cannot be reached, the
cached snapshot is used. The environment (``HF_HUB_OFFLINE``,
``HF_HUB_CACHE``, ``HF_HOME``, ``HF_ENDPOINT``) is read at each call, not at
import, so it can be changed inside a session.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from toolkit.errors import CheckpointFileError, HubUnreachableError, NotReadableInPlaceError, SourceNotFoundError
from toolkit.sources.base import Source

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_FILE_SUFFIXES = (".gguf", ".safetensors", ".bin", ".json", ".pt", ".pth")
_WEIGHT_SETS = (
    ("model.safetensors.index.json", "model.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model.bin"),
)


def looks_like_hub_id(text: str) -> bool:
    """``"org/name"`` or ``"name"``, not a path-looking string (``./x``, ``a/b/c``, ``x.gguf``)."""
    return bool(_HUB_ID.fullmatch(text)) and ".." not in text and not text.endswith(_FILE_SUFFIXES)


#: The longest repo (and namespace) name the hub accepts (``huggingface_hub.utils.validate_repo_id``).
MAX_NAME = 96


def hub_id_problem(text: str) -> str:
    """Why the hub would refuse ``text`` as a repo id (``huggingface_hub``'s rules), ``""`` when it would not.

    Checked before any hub call, so the answer is a :class:`SourceNotFoundError`
    naming the id, not the hub client's own validation error.
    """
    parts = text.split("/")
    if len(parts) > 2:
        return "a hub id is 'name' or 'org/name', with at most one '/'"
    for part in parts:
        if not part:
            return "an empty name before or after '/'"
        if len(part) > MAX_NAME:
            return f"a hub name is at most {MAX_NAME} characters, this one has {len(part)} ({part[:24]!r}...)"
        if not _HUB_ID.fullmatch(part) or part[-1] in "-.":
            return (f"{part!r}: a hub name is made of letters, digits, '-', '_' and '.', and does not start or "
                    "end with '-' or '.'")
    if "--" in text or ".." in text:
        return "a hub id cannot contain '--' or '..'"
    if text.endswith(".git"):
        return "a hub id cannot end with '.git'"
    return ""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def is_offline() -> bool:
    """Whether hub access is switched off (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``)."""
    from huggingface_hub import constants

    return _truthy(os.environ.get("HF_HUB_OFFLINE")) or _truthy(os.environ.get("TRANSFORMERS_OFFLINE")) or (
        "HF_HUB_OFFLINE" not in os.environ and bool(constants.HF_HUB_OFFLINE)
    )


def cache_dir() -> str:
    """The HF hub cache folder: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else the default."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hub")
    return constants.HF_HUB_CACHE


def _network_errors() -> tuple[type[BaseException], ...]:
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    from toolkit.errors import RemoteTransientError

    # RemoteTransientError: the hub listing found nothing listening (the one transport, no retry)
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError, OfflineModeIsEnabled, LocalEntryNotFoundError,
                                         RemoteTransientError]
    http_module = sys.modules.get(HfHubHTTPError.__mro__[1].__module__)  # httpx (or its fork) used by the client
    if http_module is not None and hasattr(http_module, "TransportError"):
        errors.append(http_module.TransportError)
    errors.append(HfHubHTTPError)  # 5xx, 429...: the not-found subclasses are caught before
    return tuple(errors)


def unreachable_reason(exc: BaseException, limit: int = 160) -> str:
    """What went wrong with the hub, for a message: ``exc``'s type and its text (a
    :class:`~toolkit.errors.RemoteReadError`'s reason, without the URL the message names already),
    cut at a word before ``limit`` characters and never inside parentheses (a cut there printed
    ``no answer ()``); the type alone when the text is empty."""
    from toolkit.errors import RemoteReadError

    text = " ".join(str(getattr(exc, "reason", "") if isinstance(exc, RemoteReadError) else exc).split())
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0]
        while text.count("(") > text.count(")"):  # drop an opened parenthesis with what follows it
            text = text[:text.rfind("(")].rstrip()
        text = f"{text} ..." if text else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _wanted_files(repo_id: str, files: list[str], gguf_file: str | None) -> list[str]:
    """The files of the repo to download (index first when sharded)."""
    top = {f for f in files if "/" not in f}
    if gguf_file:
        if gguf_file not in files:
            ggufs = sorted(f for f in files if f.endswith(".gguf"))
            raise SourceNotFoundError(
                repo_id, f"the repo has no file {gguf_file!r}; its GGUF files: {', '.join(ggufs) or 'none'}"
            )
        return [gguf_file]
    config = ["config.json"] if "config.json" in top else []
    for index, single in _WEIGHT_SETS:
        if index in top:
            return config + [index]
        if single in top:
            return config + [single]
    for adapter in ("adapter_model.safetensors", "adapter_model.bin"):  # a PEFT LoRA adapter repo
        if adapter in top and "adapter_config.json" in top:
            return ["adapter_config.json", adapter]
    ggufs = sorted(f for f in files if f.endswith(".gguf"))
    if len(ggufs) == 1:
        return ggufs
    hint = f" It holds GGUF files ({', '.join(ggufs)}): pass gguf_file='...'." if ggufs else ""
    raise SourceNotFoundError(
        repo_id, "the repo has no model.safetensors(.index.json) or pytorch_model.bin(.index.json)." + hint
    )


def _download(repo_id: str, commit: str, wanted: list[str], cache: str) -> Path:
    """``snapshot_download`` of ``wanted`` (and the shards of an index among them) at ``commit``."""
    from huggingface_hub import hf_hub_download, snapshot_download

    from toolkit.sources._common import read_index

    endpoint = os.environ.get("HF_ENDPOINT") or None
    if wanted[-1].endswith(".index.json"):
        index = hf_hub_download(repo_id, wanted[-1], revision=commit, cache_dir=cache, endpoint=endpoint)
        wanted = wanted + sorted(set(read_index(Path(index)).values()))
    folder = snapshot_download(
        repo_id, revision=commit, cache_dir=cache, allow_patterns=wanted, endpoint=endpoint
    )
    return Path(folder)


def _cached(repo_id: str, commit: str, wanted: list[str], cache: str) -> Path | None:
    """The cache snapshot of ``commit`` when it holds every file of ``wanted`` (the shards of an index
    among them), else None: such a repo is read from disk, not over the network."""
    from huggingface_hub import try_to_load_from_cache

    from toolkit.sources._common import read_index

    found = []
    for name in wanted:
        path = try_to_load_from_cache(repo_id, name, cache_dir=cache, revision=commit)
        if not isinstance(path, str):
            return None
        found.append(Path(path))
        if name.endswith(".index.json"):
            try:
                shards = sorted(set(read_index(Path(path)).values()))
            except CheckpointFileError:
                return None
            wanted = wanted + [s for s in shards if s not in wanted]
    return found[0].parent if found else None


def _from_cache(repo_id: str, revision: str | None, cache: str, why: str, advice: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=cache, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError):
        rev = f" at revision {revision!r}" if revision else ""
        raise HubUnreachableError(
            repo_id,
            f"it is not a local path, and {why}, and the local Hugging Face cache ({cache}) has no copy of it{rev}. "
            "Pass the path of a local copy instead (a folder with config.json and model.safetensors, or a .gguf file), "
            f"or {advice}, or point HF_HUB_CACHE (or HF_HOME) at the cache that holds it.",
            cache,
        ) from None


def open_hub(repo_id: str, *, revision: str | None = None, gguf_file: str | None = None,
             download: bool = False) -> Source:
    """Open a hub repo's weights: from the local HF cache, else read in place over HTTP, or downloaded.

    Online, the revision is resolved to its commit and the repo listed (one
    request, :func:`toolkit.sources.remote.hub_folder`). A commit whose weight
    files are all in the local cache is read from there; otherwise its
    safetensors weights are read in place by range requests
    (:mod:`toolkit.sources.remote`: headers, then only the tensors a pass
    selects; ``.bin`` weights the same, through their zip directory), and a LoRA adapter is downloaded.
    ``download=True`` downloads the safetensors weights too (``snapshot_download``).
    Offline, or when the hub cannot be reached, the cached snapshot is used.

    Parameters
    ----------
    repo_id : str
        ``"org/name"``.
    revision : str, optional
        Branch, tag or commit (default: ``main``).
    gguf_file : str, optional
        A GGUF file of the repo to open instead of its safetensors/``.bin``.
    download : bool, default False
        Download the weight files into the HF cache (``snapshot_download``) instead of reading them in place.

    Returns
    -------
    Source
        ``location`` is ``repo_id``; ``revision`` the resolved commit.

    Raises
    ------
    HubUnreachableError
        Offline or unreachable, and not in the cache.
    SourceNotFoundError
        No such repo, revision or file on the hub.
    CheckpointFileError
        The downloaded or cached files are incomplete or corrupted.
    RemoteAccessError
        Reading in place, the hub refuses the files (a gated or private repo: the message says how to log in).
    RemoteReadError
        Reading in place, the hub keeps failing (retries spent) or answers with other bytes than asked for.
    """
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from toolkit.sources.local import open_local
    from toolkit.sources.remote import hub_folder, open_remote, reads_in_place
    from toolkit.sources.remote.probe import HUB_REFUSALS
    from toolkit.sources.remote.transport import client_failure
    from toolkit.sources.remote.transport import http_library as _http_library

    cache = cache_dir()
    folder = remote = None
    if is_offline():
        why = "the hub is switched off (HF_HUB_OFFLINE=1)"
        advice = "unset HF_HUB_OFFLINE and connect to the internet to download it"
    else:
        try:
            remote = hub_folder(repo_id, revision)
            wanted = _wanted_files(repo_id, remote.names(), gguf_file)
            target = wanted[-1] if reads_in_place(wanted[-1]) else ""
            if not download:
                folder = _cached(repo_id, remote.commit, wanted, cache)
            if folder is None and (download or not target):
                folder = _download(repo_id, remote.commit, wanted, cache)
        # the hub client's exceptions name the URLs as sent (HF_ENDPOINT's userinfo too): a typed error redacts
        # what it quotes of them, and none is chained
        except GatedRepoError:
            raise SourceNotFoundError(repo_id, HUB_REFUSALS["gated"]) from None
        except RepositoryNotFoundError:
            raise SourceNotFoundError(repo_id, HUB_REFUSALS["repo"]) from None
        except RevisionNotFoundError:
            raise SourceNotFoundError(repo_id, HUB_REFUSALS["revision"].format(revision=revision)) from None
        except RemoteEntryNotFoundError as exc:
            raise SourceNotFoundError(repo_id, f"a file is missing on the hub ({exc})") from None
        except HFValidationError as exc:
            raise SourceNotFoundError(
                repo_id, f"the hub client refuses the id, revision or a file name ({exc}); check them"
            ) from None
        except (_http_library().TooManyRedirects, _http_library().UnsupportedProtocol,
                _http_library().InvalidURL) as exc:  # the hub client's own downloads: no retry cures these
            raise client_failure(exc, repo_id) from None
        except _network_errors() as exc:
            remote = None  # the cached copy, if any, is used (below)
            why = f"the hub cannot be reached ({unreachable_reason(exc)})"
            advice = ("check the network connection (and HF_ENDPOINT) to download it; set HF_HUB_OFFLINE=1 to use "
                      "only the local cache without trying the hub")
    if folder is not None:
        return open_local(folder, gguf_file=gguf_file, location=repo_id, revision=folder.name)
    if remote is not None:
        try:
            return open_remote(remote, target)
        except NotReadableInPlaceError:  # a layout only transformers reads, from disk: downloaded as before
            folder = _download(repo_id, remote.commit, wanted, cache)
            return open_local(folder, gguf_file=gguf_file, location=repo_id, revision=folder.name)
    try:
        folder = _from_cache(repo_id, revision, cache, why, advice)
    except HFValidationError as exc:
        raise SourceNotFoundError(repo_id, f"the hub client refuses the id or revision ({exc}); check them") from None
    try:
        return open_local(folder, gguf_file=gguf_file, location=repo_id, revision=folder.name)
    except (SourceNotFoundError, CheckpointFileError) as exc:  # a partial download in the cache
        raise HubUnreachableError(
            repo_id, f"{why}, and its cached copy ({folder}) is incomplete: {exc}. Either {advice}, "
            "or pass the path of a complete local copy instead.", cache,
        ) from exc
