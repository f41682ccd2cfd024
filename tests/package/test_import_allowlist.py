"""Each front door imports only what its work needs (issue 47).

The doors: ``import toolkit``, ``weight_stats`` on the embedded GGUF and on a
llama and a BERT folder written by ``transformers``' ``save_pretrained``, ``compare`` of
two such folders, ``python -m toolkit weights -o FILE.nc`` and ``load`` of that
file. Every door runs on a local source in its own copy of a fresh interpreter
(``tests/_import_probe.py``: one start, one fork per door, so the whole test
takes one interpreter start and a few seconds) and the test compares the
third-party top-level packages it imported with the door's allow-list.

An allow-list, not a deny-list of known heavy packages: a deny-list only keeps
out what someone already thought of, while a new ``import`` of anything (an
HTTP client, a plotting or templating library, ``distributed``) fails here by
name. What the libraries every door needs import on their own is counted out:
the probe's interpreter imports numpy, torch and xarray and builds xarray's
first Dataset before forking (xarray then imports ``dask`` and, through dask,
``jinja2`` where dask is installed; the toolkit cannot avoid that without
patching xarray), and the CLI door's setup asks dask for its scheduler as
xarray's ``to_netcdf`` does (which imports ``distributed`` where installed).
The standard library is always allowed.

The packages these allow-lists keep out include ``transformers``, ``accelerate``,
``sympy``, ``huggingface_hub``, ``httpx``, ``requests``, ``matplotlib``,
``seaborn``, ``PIL``, ``ipywidgets`` and ``anywidget``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import toolkit
from toolkit.testing import write_tiny_checkpoint

PROBE = Path(__file__).resolve().parents[1] / "_import_probe.py"

#: Third-party packages any door may import beyond those the probe's interpreter already holds: the toolkit and
#: its always-needed dependencies (some already loaded by torch or xarray in one version and not in another).
COMMON = frozenset({
    "toolkit", "numpy", "torch", "xarray", "pandas", "threadpoolctl", "tqdm", "platformdirs",
    "packaging", "typing_extensions", "dateutil", "pytz", "tzdata",
})

#: Per door, what its work needs on top of :data:`COMMON`.
ALLOWED = {
    "import toolkit": COMMON,
    "weight_stats(gguf)": COMMON | {"gguf", "yaml"},  # gguf imports yaml
    "weight_stats(safetensors)": COMMON | {"safetensors"},
    "weight_stats(bert safetensors)": COMMON | {"safetensors"},
    "compare(safetensors, safetensors)": COMMON | {"safetensors", "scipy"},  # the subspace's selected eigenvectors
    "python -m toolkit weights": COMMON | {"gguf", "yaml", "h5netcdf", "h5py"},  # -o writes NetCDF4
    "load(.nc)": COMMON | {"h5netcdf", "h5py"},
}

#: xarray's ``to_netcdf`` asks dask for its scheduler (importing ``distributed`` where installed).
XARRAY_WRITES = """
try:
    import dask.base
except ImportError:
    pass
else:
    dask.base.get_scheduler()
"""


def doors(tmp: Path) -> dict[str, dict]:
    """The front doors, each as code that sets ``result`` to a value the test checks."""
    first, second = tmp / "llama_a", tmp / "llama_b"
    write_tiny_checkpoint(first, "llama", num_layers=2, seed=0)
    write_tiny_checkpoint(second, "llama", num_layers=2, seed=1)
    bert = write_tiny_checkpoint(tmp / "bert", "bert", num_layers=2)  # config.json without head_dim
    out = tmp / "smollm2.nc"

    def cached(name: str, body: str, setup: str = "") -> dict:
        code = f"import os\nos.environ['TOOLKIT_CACHE_DIR'] = {str(tmp / ('cache-' + name))!r}\n{body}"
        return {"setup": setup, "code": code}

    return {
        "import toolkit": cached("import", "import toolkit\nresult = toolkit.__version__"),
        "weight_stats(gguf)": cached("gguf", (
            "import toolkit\n"
            "ds = toolkit.weight_stats(layers=0, progress=False)\n"
            "result = [int(ds.sizes['layer']), int(ds.frobenius_norm.notnull().sum())]"
        )),
        "weight_stats(safetensors)": cached("st", (
            "import toolkit\n"
            f"ds = toolkit.weight_stats({str(first)!r}, progress=False)\n"
            "result = [int(ds.sizes['layer']), int(ds.frobenius_norm.notnull().sum())]"
        )),
        "weight_stats(bert safetensors)": cached("bert", (
            "import toolkit\n"
            f"ds = toolkit.weight_stats({str(bert)!r}, progress=False)\n"
            "result = [int(ds.sizes['layer']), int(ds.frobenius_norm.notnull().sum())]"
        )),
        "compare(safetensors, safetensors)": cached("compare", (
            "import toolkit\n"
            f"ds = toolkit.compare({str(first)!r}, {str(second)!r}, progress=False)\n"
            "result = [int(ds.sizes['layer']), float(ds.relative_change.min())]"
        )),
        "python -m toolkit weights": cached("cli", (
            "import runpy, sys\n"
            f"sys.argv = ['toolkit', 'weights', '--layers', '0', '-q', '-o', {str(out)!r}]\n"
            "try:\n"
            "    runpy.run_module('toolkit', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as stop:\n"
            "    assert stop.code in (0, None), stop.code\n"
            f"result = os.path.getsize({str(out)!r})"
        ), setup=XARRAY_WRITES),
        "load(.nc)": cached("load", (  # the file the CLI door wrote
            "import toolkit\n"
            f"ds = toolkit.load({str(out)!r})\n"
            "result = [int(ds.sizes['layer']), int(ds.frobenius_norm.notnull().sum())]"
        )),
    }


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    """The probe's report of every door."""
    tmp = tmp_path_factory.mktemp("doors")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(PROBE), json.dumps(doors(tmp))], capture_output=True, text=True,
                         env=env, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def third_party(names) -> set[str]:
    """The names that are neither the standard library nor private (``_ctypes``, ``__main__``)."""
    return {n for n in names if n not in sys.stdlib_module_names and not n.startswith("_")}


@pytest.mark.parametrize("door", list(ALLOWED))
def test_front_door_imports_only_its_allow_list(report, door):
    got = report[door]
    assert "error" not in got, got["error"]
    unexpected = sorted(third_party(got["new"]) - ALLOWED[door])
    assert unexpected == [], f"{door} imported {unexpected}: make the import lazy where it is used"


def test_front_doors_did_their_work(report):
    assert report["weight_stats(gguf)"]["result"] == [1, 7]  # SmolLM2's layer 0: its 7 components
    assert report["weight_stats(safetensors)"]["result"] == [2, 14]
    assert report["weight_stats(bert safetensors)"]["result"] == [2, 12]  # no gate in BERT's MLP
    layers, change = report["compare(safetensors, safetensors)"]["result"]
    assert layers == 2 and change > 0.5  # two independent random inits: every matrix changed
    assert report["python -m toolkit weights"]["result"] > 10_000  # a NetCDF4 file of one layer's cells
    assert report["load(.nc)"]["result"] == [1, 7]
    assert report["import toolkit"]["result"] == toolkit.__version__

