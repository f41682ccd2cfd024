"""singular_values: the Gram and SVD routes, orientation, dtype, accuracy floors."""

import numpy as np
import pytest
import torch

from toolkit.metrics import DegenerateMatrix, singular_values


def _random(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _with_spectrum(m, n, sv, seed=0):
    """float64 matrix U diag(sv) V^T with the given singular values."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((m, len(sv))))
    v, _ = np.linalg.qr(rng.standard_normal((n, len(sv))))
    return torch.from_numpy((u * np.asarray(sv)) @ v.T)


@pytest.mark.parametrize("shape", [(50, 50), (200, 40), (40, 200), (1, 17), (17, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_routes_agree_and_match_numpy(shape, dtype):
    w = _random(shape, dtype)
    want = np.linalg.svd(w.double().numpy(), compute_uv=False)
    gram = singular_values(w, method="gram")
    svd = singular_values(w, method="svd")
    auto = singular_values(w)
    for s in (gram, svd, auto):
        assert s.dtype == torch.float64 and s.device.type == "cpu" and s.shape == (min(shape),)
        assert bool((s[:-1] >= s[1:]).all())  # descending
    np.testing.assert_allclose(gram.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(svd.numpy(), want, rtol=1e-5 if dtype == torch.float32 else 1e-10)
    np.testing.assert_allclose(gram.numpy(), svd.numpy(), rtol=1e-5 if dtype == torch.float32 else 1e-6)
    np.testing.assert_allclose(auto.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("method", ["auto", "gram", "svd"])
def test_transposition_invariance(method):
    w = _random((120, 35), torch.float32, seed=3)
    np.testing.assert_allclose(
        singular_values(w, method=method).numpy(), singular_values(w.T, method=method).numpy(), rtol=1e-6
    )
    np.testing.assert_allclose(
        singular_values(w.T.contiguous()).numpy(), singular_values(w).numpy(), rtol=1e-12
    )


def test_gram_blocks_accumulate_exactly(monkeypatch):
    import toolkit.metrics.gram as gram

    w = _random((300, 90), torch.float32, seed=5)
    whole = singular_values(w, method="gram")
    monkeypatch.setattr(gram, "_GRAM_BLOCK", 5000)  # many small blocks, both orientations
    np.testing.assert_allclose(singular_values(w, method="gram").numpy(), whole.numpy(), rtol=1e-12)
    np.testing.assert_allclose(singular_values(w.T, method="gram").numpy(), whole.numpy(), rtol=1e-12)


def test_float64_ill_conditioned_uses_svd():
    sv = np.logspace(0, -10, 20)
    w = _with_spectrum(60, 30, sv)
    auto = singular_values(w)  # float64 input, kappa = 1e10 > 1e4: SVD fallback
    np.testing.assert_allclose(auto.numpy()[:20], sv, rtol=1e-5)
    assert bool((auto[20:] == 0).all())
    gram = singular_values(w, method="gram")  # squared condition number loses the small ones
    assert gram[19] == 0.0
    np.testing.assert_allclose(gram.numpy()[:5], sv[:5], rtol=1e-8)


def test_float32_well_conditioned_uses_gram_and_is_accurate():
    sv = np.linspace(3.0, 0.5, 16)
    w = _with_spectrum(64, 16, sv).float()
    want = np.linalg.svd(w.double().numpy(), compute_uv=False)
    np.testing.assert_allclose(singular_values(w).numpy(), want, rtol=1e-10)


def test_rank_deficient_exact_zeros():
    w = _with_spectrum(40, 25, [5.0, 2.0, 1.0]).float()
    for method in ("auto", "gram", "svd"):
        s = singular_values(w, method=method)
        assert int((s > 0).sum()) == 3, method
        np.testing.assert_allclose(s[:3].numpy(), [5.0, 2.0, 1.0], rtol=1e-5)


def test_low_precision_and_integer_input():
    w = _random((20, 10), torch.float32, seed=2)
    want = singular_values(w.bfloat16().float())
    np.testing.assert_allclose(singular_values(w.bfloat16()).numpy(), want.numpy(), rtol=1e-12)
    assert singular_values(torch.eye(3, dtype=torch.int64)).tolist() == [1.0, 1.0, 1.0]


def test_bad_input():
    with pytest.raises(DegenerateMatrix, match="2-D"):
        singular_values(torch.ones(5))
    with pytest.raises(DegenerateMatrix, match="2-D"):
        singular_values(torch.ones(0, 3))
    with pytest.raises(ValueError, match="method"):
        singular_values(torch.ones(2, 2), method="qr")


def test_explicit_cpu_device():
    w = _random((10, 6), torch.float32)
    assert torch.equal(singular_values(w, device="cpu"), singular_values(w, device=torch.device("cpu")))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    w = _random((300, 120), torch.float32)
    on_gpu = singular_values(w, device="cuda")
    assert on_gpu.device.type == "cpu" and on_gpu.dtype == torch.float64
    np.testing.assert_allclose(on_gpu.numpy(), singular_values(w).numpy(), rtol=1e-9)


def test_gram_buffers_are_kept_only_by_pass_threads():
    import threading

    import torch

    from toolkit.metrics import spectral

    w = torch.randn(40, 12, dtype=torch.float32)
    ref = spectral.singular_values(w)  # main thread: fresh buffers, nothing kept
    assert getattr(spectral._BUFFERS, "gram", None) is None
    kept = {}

    def in_pass():
        with spectral.reuse_buffers():
            kept["s"] = spectral.singular_values(w)
            kept["gram"] = getattr(spectral._BUFFERS, "gram", None)
        kept["after"] = getattr(spectral._BUFFERS, "gram", None)

    t = threading.Thread(target=in_pass)
    t.start()
    t.join()
    assert kept["gram"] is not None and kept["gram"].size >= 12 * 12
    assert kept["after"] is None  # freed when the context ends
    assert torch.equal(kept["s"], ref)


def test_large_gram_buffers_are_freed_after_each_matrix_with_the_same_values(monkeypatch):
    """Inside reuse_buffers a pass keeps its small buffers from matrix to matrix, but frees the Gram matrix
    and its product buffer from gram._MAPPED bytes on (here lowered to one byte): values unchanged."""
    from toolkit.metrics import gram

    w = _random((90, 60), torch.float32)
    want = np.linalg.svd(w.double().numpy(), compute_uv=False)
    with gram.reuse_buffers():
        kept = singular_values(w)
        assert {"gram", "product"} <= set(vars(gram._BUFFERS))
        monkeypatch.setattr(gram, "_MAPPED", 1)
        dropped = singular_values(w)
        assert not {"gram", "product"} & set(vars(gram._BUFFERS))
    torch.testing.assert_close(kept, dropped, rtol=0, atol=0)
    np.testing.assert_allclose(dropped.numpy(), want, rtol=1e-12)
