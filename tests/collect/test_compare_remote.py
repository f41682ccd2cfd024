"""``compare`` of two checkpoints read in place over HTTP (nginx on loopback): a selection moves only the
selected tensor pairs' bytes plus the headers (issue 38: at most 1.05x), with the local values."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import toolkit
from _compare_data import bump_ulps, variant
from _http_server import NGINX, Nginx
from toolkit.sources.safetensors_ import read_header

if NGINX is None:
    pytest.skip("nginx is not installed (apt-get install nginx-light, as .ci/server-deps.sh does)",
                allow_module_level=True)

SELECTED = ("layers.1.self_attn.q_proj.weight", "layers.1.mlp.down_proj.weight")


@pytest.fixture(scope="module")
def pair(tmp_path_factory, tiny_qwen2):
    """nginx over ``/plain/base`` (the sharded tiny Qwen2) and ``/plain/tuned`` (every matrix with its
    first entries moved by one bf16 ulp), and the local folders."""
    _, folders = tiny_qwen2
    tmp = tmp_path_factory.mktemp("compare_http")
    root = tmp / "www"
    shutil.copytree(folders["sharded"], root / "plain" / "base")
    tuned = variant(folders["single"], tmp / "tuned", lambda name, t: bump_ulps(t, 7) if t.ndim == 2 else t)
    shutil.copytree(tuned, root / "plain" / "tuned")
    server = Nginx(root, tmp / "nginx").start()
    yield server, root / "plain"
    server.stop()


def header_and_selected_bytes(folder) -> tuple[int, int]:
    headers = selected = 0
    for f in folder.glob("*.safetensors"):
        with open(f, "rb") as fh:
            headers += 8 + int.from_bytes(fh.read(8), "little")
        selected += sum(e.nbytes for name, e in read_header(f).items() if name.endswith(SELECTED))
    return headers, selected


def test_a_selected_compare_of_two_urls_moves_the_selected_pairs_bytes(pair, tmp_path, monkeypatch):
    server, plain = pair
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    mark = server.mark()
    ds = toolkit.compare(f"{server.url}/plain/base/", f"{server.url}/plain/tuned/", layers=[1],
                         components=["attn.q", "mlp.down"], progress=False)
    moved = server.bytes_sent(mark, ".safetensors")
    headers, selected = map(sum, zip(*(header_and_selected_bytes(plain / s) for s in ("base", "tuned")),
                                     strict=True))
    assert selected > 0 and selected <= moved <= 1.05 * selected + headers
    local = toolkit.compare(plain / "base", plain / "tuned", layers=[1], components=["attn.q", "mlp.down"],
                            progress=False, cache=False)
    for name in ("relative_change", "update_sparsity", "cosine_similarity", "delta_stable_rank"):
        np.testing.assert_array_equal(ds[name].values, local[name].values)
    assert 0 < float(ds.update_sparsity.sel(layer=1, component="attn.q")) < 1
