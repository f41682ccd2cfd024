"""The fast paths of a pass: shared entry-wise reductions, reused float32
buffers, read-ahead pipelines, and the light GGUF metadata reader."""

import threading

import numpy as np
import pytest
import scipy.stats
import torch

import toolkit
from toolkit.collect.execute.stream import Workspace, float32_stream, map_tensors
from toolkit.metrics import compute_weight_metrics, norms
from toolkit.testing import write_tiny_checkpoint


def test_moments_do_not_modify_float64_input():
    w = torch.randn(50, 40, dtype=torch.float64) + 2.0
    before = w.clone()
    norms.kurtosis(w)
    norms.frobenius_norm(w)
    assert torch.equal(w, before)


def test_shared_reductions_follow_in_place_changes():
    w = torch.randn(30, 20)
    first = norms.frobenius_norm(w)
    w.mul_(2.0)  # same object, new version: the memo must not answer
    assert norms.frobenius_norm(w) == pytest.approx(2 * first, rel=1e-12)
    assert norms.max_abs_over_rms(w) == pytest.approx(float(w.abs().max()) / float(w.pow(2).mean().sqrt()), rel=1e-6)


def test_shared_reductions_never_confuse_two_tensors():
    # same shape, allocated one after the other (often at the same address)
    values = []
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        w = torch.randn(64, 32, generator=g) * (seed + 1)
        values.append((norms.frobenius_norm(w), float(torch.linalg.vector_norm(w.double()))))
        del w
    for got, want in values:
        assert got == pytest.approx(want, rel=1e-12)


def test_inference_mode_tensor_is_measured_without_memo():
    with torch.inference_mode():
        w = torch.randn(20, 10)
    a = w.double().numpy().ravel()
    assert norms.kurtosis(w) == pytest.approx(scipy.stats.kurtosis(a, fisher=True, bias=True), rel=1e-9)


def test_workspace_reuses_one_buffer_and_keeps_float32():
    ws = Workspace()
    a = ws.float32(torch.randn(6, 4).to(torch.bfloat16))
    ptr = a.data_ptr()
    b = ws.float32(torch.randn(3, 5).to(torch.float16))
    assert b.dtype == torch.float32 and b.shape == (3, 5) and b.data_ptr() == ptr
    x = torch.randn(4, 4)
    assert ws.float32(x) is x


def test_float32_stream_order_values_and_skips():
    tensors = [torch.randn(5, 3).to(torch.bfloat16) for _ in range(4)]
    readers = [lambda t=t: t for t in tensors]
    readers[2] = None
    got = [None if t is None else t.clone() for t in float32_stream(readers)]
    assert got[2] is None
    for i in (0, 1, 3):
        assert torch.equal(got[i], tensors[i].float())


def test_map_tensors_runs_every_job_once_and_restores_threads():
    before = torch.get_num_threads()
    tensors = [torch.full((4, 4), float(i)) for i in range(9)]
    seen = []
    out = dict(map_tensors([lambda t=t: t for t in tensors],
                           lambda i, t: (seen.append(threading.get_ident()), float(t[0, 0]))[1]))
    assert out == {i: float(i) for i in range(9)}
    assert torch.get_num_threads() == before


def test_map_tensors_raises_a_reader_error():
    def bad():
        raise OSError("disk on fire")

    readers = [lambda: torch.zeros(2, 2)] * 3 + [bad] + [lambda: torch.zeros(2, 2)] * 3
    with pytest.raises(OSError, match="disk on fire"):
        list(map_tensors(readers, lambda i, t: i))
    assert torch.get_num_threads() >= 1


def test_weight_stats_same_values_whatever_the_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", "off")
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = toolkit.weight_stats(path, progress=False)
        torch.set_num_threads(2)
        two = toolkit.weight_stats(path, progress=False)
    finally:
        torch.set_num_threads(before)
    for name in one.data_vars:
        np.testing.assert_allclose(one[name].values, two[name].values, rtol=1e-12, equal_nan=True)


def test_evaluate_matches_compute_weight_metrics_on_bf16():
    from toolkit.metrics.evaluate import evaluate_matrix
    from toolkit.metrics.registry import resolve_metrics

    w = (torch.randn(40, 24) * 0.05).to(torch.bfloat16)
    cell = evaluate_matrix(w, resolve_metrics(None, kind="weight"))
    ref = compute_weight_metrics(w.float())
    for name, mv in ref.items():
        assert cell.values[name] == pytest.approx(mv.value, rel=1e-9, nan_ok=True), name


def test_entrywise_metrics_read_the_storage_dtype_and_others_get_float32(tmp_path, monkeypatch):
    from toolkit.metrics.evaluate import evaluate_matrix
    from toolkit.metrics.registry import register_metric, resolve_metrics, unregister_metric

    entrywise = resolve_metrics(["frobenius_norm", "rms", "kurtosis", "max_abs_over_rms"], kind="weight")
    assert all(m.any_dtype for m in entrywise) and not toolkit.get_metric("stable_rank").any_dtype
    w = (torch.randn(40, 24, generator=torch.Generator().manual_seed(5)) * 0.05).to(torch.bfloat16)
    x = w.double().numpy().ravel()
    cell = evaluate_matrix(w, entrywise)  # measured straight from bf16
    assert cell.values["frobenius_norm"] == pytest.approx(float(np.sqrt(x @ x)), rel=1e-13)
    assert cell.values["kurtosis"] == pytest.approx(float(scipy.stats.kurtosis(x, bias=True)), rel=1e-10)
    assert cell.values["max_abs_over_rms"] == pytest.approx(float(np.abs(x).max() / np.sqrt(x @ x / x.size)),
                                                            rel=1e-13)
    seen = []
    register_metric("dtype_probe_test", lambda w, s: seen.append(w.dtype) or 1.0, long_name="probe")
    try:
        monkeypatch.setenv("TOOLKIT_CACHE_DIR", "off")
        path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2, dtype=torch.bfloat16)
        with_probe = toolkit.weight_stats(path, ["frobenius_norm", "dtype_probe_test"], progress=False)
        alone = toolkit.weight_stats(path, ["frobenius_norm"], progress=False)
    finally:
        unregister_metric("dtype_probe_test")
    assert seen and set(seen) == {torch.float32}  # a metric that did not declare any_dtype gets float32
    np.testing.assert_allclose(alone.frobenius_norm, with_probe.frobenius_norm, rtol=1e-13)


def test_light_gguf_reader_gives_transformers_config():
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from toolkit.bundled import default_model_path
    from toolkit.sources.gguf import gguf_config

    path = str(default_model_path())
    assert gguf_config(path, "llama") == load_gguf_checkpoint(path, return_tensors=False)["config"]


def test_map_tensors_limits_blas_inside_and_hands_control_back():
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas()
    seen = dict(map_tensors([lambda: torch.ones(2, 2)] * 4, lambda i, t: blas(), pipelines=2))
    assert all(set(v) == {max(1, torch.get_num_threads() // 2)} for v in seen.values())
    assert blas() == before
    got = []

    def other():  # another thread can limit BLAS afterwards (threadpoolctl >= 3.8 gives
        with threadpool_limits(1, user_api="blas"):  # OpenBLAS to one controlling thread)
            got.append(blas())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert got and set(got[0]) == {1} and blas() == before


def test_read_ahead_takes_no_reader_ahead_when_told_not_to():
    """ahead() False: the next reader is taken only once the caller asks for the next item (map_tensors'
    pipelines take the last tensors when free); True: one reader ahead, as before."""
    from toolkit.collect.execute.stream import read_ahead

    for flag, want in ((False, [1, 2, 3]), (True, [2, 3, 3])):
        taken = []

        def readers(taken=taken):
            for i in range(3):
                taken.append(i)
                yield lambda i=i: i

        seen = []
        for value in read_ahead(readers(), ahead=lambda flag=flag: flag):
            seen.append(value)
            assert len(taken) == want[len(seen) - 1], (flag, value, taken)
        assert seen == [0, 1, 2]
