"""The result cache: re-runs read nothing, changed files invalidate, killed runs resume."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import xarray as xr

import toolkit
from toolkit.collect.cache import cache_dir
from toolkit.collect.cache_folders import cache_info, clear_cache
from toolkit.testing import write_tiny_checkpoint

METRICS = ["frobenius_norm", "stable_rank", "alpha"]


def _strip(ds):
    return ds.drop_attrs()


def test_second_run_reads_no_tensor_and_gives_same_dataset(tmp_path, cache, reads):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=4)
    first = toolkit.weight_stats(path, metrics=METRICS, progress=False)
    n_first = len(reads)
    assert n_first == 4 * 7
    second = toolkit.weight_stats(path, metrics=METRICS, progress=False)
    assert len(reads) == n_first  # nothing read again
    xr.testing.assert_identical(_strip(first), _strip(second))
    # a new metric computes only that metric, reading each tensor once more
    third = toolkit.weight_stats(path, metrics=METRICS + ["rms"], progress=False)
    assert len(reads) == 2 * n_first
    np.testing.assert_array_equal(third.stable_rank.values, first.stable_rank.values)


def test_changed_file_invalidates(tmp_path, cache, reads):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    a = toolkit.weight_stats(path, metrics=["frobenius_norm"], progress=False)
    write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2, seed=1)  # same names, new values
    st = (path / "model.safetensors").stat()
    os.utime(path / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    b = toolkit.weight_stats(path, metrics=["frobenius_norm"], progress=False)
    assert len(reads) == 2 * 2 * 7
    assert not np.allclose(a.frobenius_norm.values, b.frobenius_norm.values)


def test_disabled_by_env_and_argument(tmp_path, monkeypatch, reads):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", "off")
    assert cache_dir() is None
    toolkit.weight_stats(path, metrics=["rms"], progress=False)
    toolkit.weight_stats(path, metrics=["rms"], progress=False)
    assert len(reads) == 2 * 14
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "c"))
    toolkit.weight_stats(path, metrics=["rms"], progress=False, cache=False)
    assert not (tmp_path / "c").exists()


def test_info_and_clear(tmp_path, cache):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    toolkit.weight_stats(path, metrics=["rms"], progress=False)
    info = cache_info()
    assert info["files"] == 14 + 1 and info["bytes"] > 0 and info["path"] == str(cache)  # the cells and the plan
    assert clear_cache() == info["bytes"]
    assert cache_info()["files"] == 0


def test_torn_cache_file_is_a_miss_not_a_wrong_number(tmp_path, cache):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    a = toolkit.weight_stats(path, metrics=["rms"], progress=False)
    for f in cache.rglob("*.json"):
        f.write_text(f.read_text()[:20])
    b = toolkit.weight_stats(path, metrics=["rms"], progress=False)
    xr.testing.assert_identical(_strip(a), _strip(b))


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    import toolkit

    def progress(done, total, name):
        if done == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)

    toolkit.weight_stats(sys.argv[1], metrics={metrics!r}, progress=progress)
    """
)


def test_killed_run_resumes_computing_only_the_missing(tmp_path, cache, reads):
    path = write_tiny_checkpoint(tmp_path / "m", "qwen2", num_layers=6)
    script = tmp_path / "killer.py"
    script.write_text(KILLER.format(metrics=METRICS))
    env = dict(os.environ, TOOLKIT_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, str(script), str(path), "17"], env=env, capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    resumed = toolkit.weight_stats(path, metrics=METRICS, progress=False)
    assert len(reads) == 6 * 7 - 17
    fresh = toolkit.weight_stats(path, metrics=METRICS, progress=False, cache=False)
    same_but_last_bits(resumed, fresh)


def test_two_processes_at_once_leave_a_valid_cache(tmp_path, cache, reads):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=6)
    script = tmp_path / "run.py"
    script.write_text(
        "import sys, toolkit\n"
        f"toolkit.weight_stats(sys.argv[1], metrics={METRICS!r}, progress=False)\n"
    )
    env = dict(os.environ, TOOLKIT_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, str(script), str(path)], env=env, stderr=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        assert p.wait() == 0, p.stderr.read().decode()[-2000:]
    cached = toolkit.weight_stats(path, metrics=METRICS, progress=False)
    assert reads == []  # every cell was readable from the cache
    fresh = toolkit.weight_stats(path, metrics=METRICS, progress=False, cache=False)
    same_but_last_bits(cached, fresh)


def same_but_last_bits(cached, fresh):
    """Cells another process computed against this one's: equal attrs and coordinates, values within 1e-12
    relative. BLAS splits a Gram matrix's sums by the threads it is given, which depends on how many passes run
    at once, so two processes may differ in the last bits (seen once in ~10 suite runs: stable_rank and alpha)."""
    a, b = _strip(cached), _strip(fresh)
    xr.testing.assert_allclose(a, b, rtol=1e-12, atol=0.0)
    assert a.attrs == b.attrs and all(a[v].attrs == b[v].attrs for v in a.data_vars)
