"""Reading checkpoints in place over HTTP, against a real server on loopback (nginx) and a fault proxy.

Every test counts the bytes on the server side (nginx's access log) and
compares the values with a local read of the same files, bit for bit.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import toolkit
from _http_server import NGINX, Fault, FaultProxy, Nginx, lay_out_repo  # noqa: E402  (tests/ is on sys.path)
from toolkit.errors import (
    CheckpointChangedError,
    CheckpointFileError,
    NotReadableInPlaceError,
    RemoteAccessError,
    RemoteReadError,
    SourceNotFoundError,
)
from toolkit.sources.remote import http as remote_http
from toolkit.sources.safetensors_ import read_header

if NGINX is None:
    if os.environ.get("CI"):
        raise RuntimeError("nginx is not installed: .ci/server-deps.sh installs it (Debian package nginx-light)")
    pytest.skip("nginx is not installed (apt-get install nginx-light, as .ci/server-deps.sh does)",
                allow_module_level=True)

COMMIT = "1" * 40
NEW_COMMIT = "2" * 40
METRICS = ["frobenius_norm", "spectral_norm"]


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_qwen2, smollm2_path):
    """nginx over: hub repos ``tt/single``, ``tt/sharded`` and ``tt/gguf`` (the bundled SmolLM2 GGUF) at
    :data:`COMMIT`, and plain folders ``/plain/single``, ``/plain/sharded`` (copies, so a test may
    rewrite them) and ``/plain/gguf``."""
    _, folders = tiny_qwen2
    tmp = tmp_path_factory.mktemp("http")
    root = tmp / "www"
    ng = Nginx(root, tmp / "nginx")
    for name in ("single", "sharded", "bin", "bin_sharded"):
        ng.serve(lay_out_repo(root, f"tt/{name}", folders[name], COMMIT))
        shutil.copytree(folders[name], root / "plain" / name)
    legacy = tmp / "legacy"  # the bin checkpoint in torch's pre-zip format: read from disk only
    legacy.mkdir()
    shutil.copy(folders["bin"] / "config.json", legacy / "config.json")
    torch.save(tiny_qwen2[0], legacy / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    ng.serve(lay_out_repo(root, "tt/legacy", legacy, COMMIT))
    shutil.copytree(legacy, root / "plain" / "legacy")
    gguf = tmp / "gguf"
    gguf.mkdir()
    os.symlink(smollm2_path, gguf / smollm2_path.name)
    ng.serve(lay_out_repo(root, "tt/gguf", gguf, COMMIT))
    shutil.copytree(gguf, root / "plain" / "gguf", symlinks=True)
    ng.start()
    yield ng
    ng.stop()


@pytest.fixture(scope="module")
def proxy(server):
    p = FaultProxy(server.port).start()
    yield p
    p.stop()


@pytest.fixture(autouse=True)
def _hub_env(tmp_path, monkeypatch, server, proxy):
    """Each test: the hub is the proxy in front of nginx, an empty HF cache and result cache, no faults."""
    monkeypatch.setenv("HF_ENDPOINT", proxy.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(remote_http, "BACKOFF", 0.01)
    proxy.faults.clear()
    yield
    proxy.faults.clear()


@pytest.fixture(scope="module")
def local(tiny_qwen2):
    """The values of a local read of each folder, computed once."""
    _, folders = tiny_qwen2
    return {name: toolkit.weight_stats(folders[name], METRICS, progress=False, cache=False)
            for name in ("single", "sharded", "bin", "bin_sharded")}


def weights_bytes(server, mark) -> int:
    return server.bytes_sent(mark, ".safetensors")


def assert_same_values(ds, ref):
    for name in METRICS:
        np.testing.assert_array_equal(ds[name].values, ref[name].sel(layer=ds.layer, component=ds.component).values)


def header_bytes(folder: Path) -> int:
    """Bytes of every safetensors header (8 + n) of a local folder."""
    total = 0
    for f in folder.glob("*.safetensors"):
        with open(f, "rb") as fh:
            total += 8 + int.from_bytes(fh.read(8), "little")
    return total


def tensor_bytes(folder: Path, suffixes) -> int:
    return sum(e.nbytes for f in folder.glob("*.safetensors") for name, e in read_header(f).items()
               if name.endswith(suffixes))


# ------------------------------------------------------------------ reading in place


@pytest.mark.parametrize("name", ["single", "sharded"])
def test_hub_repo_is_read_in_place_with_the_local_values(server, local, tiny_qwen2, name, tmp_path):
    mark = server.mark()
    ds = toolkit.weight_stats(f"tt/{name}", METRICS, progress=False)
    assert_same_values(ds, local[name])
    assert ds.attrs["revision"] == COMMIT
    assert not any((tmp_path / "hf").rglob("*.safetensors")), "nothing is downloaded into the HF cache"
    folder = tiny_qwen2[1][name]
    moved = weights_bytes(server, mark)
    wanted = header_bytes(folder) + tensor_bytes(folder, ("_proj.weight",))
    assert moved == wanted  # the headers and every measured matrix once; no norm, no embedding


def test_a_selection_moves_only_its_tensors_bytes(server, tiny_qwen2):
    folder = tiny_qwen2[1]["sharded"]
    mark = server.mark()
    ds = toolkit.weight_stats("tt/sharded", METRICS, progress=False, layers=[1], components=["attn.q"])
    assert list(ds.component.values) == ["attn.q"] and list(ds.layer.values) == [1]
    wanted = header_bytes(folder) + tensor_bytes(folder, ("layers.1.self_attn.q_proj.weight",))
    assert weights_bytes(server, mark) == wanted


@pytest.mark.parametrize("path", ["plain/single/model.safetensors", "plain/sharded/", "plain/sharded",
                                  "plain/sharded/model.safetensors.index.json"])
def test_plain_urls_are_read_in_place(server, local, path):
    kind = "single" if "single" in path else "sharded"
    ds = toolkit.weight_stats(f"{server.url}/{path}", METRICS, progress=False)
    assert_same_values(ds, local[kind])
    assert ds.attrs["source"] == f"{server.url}/{path}"


@pytest.mark.parametrize("name", ["tt/bin", "tt/bin_sharded", "plain/bin/pytorch_model.bin", "plain/bin_sharded/"])
def test_bin_checkpoints_are_read_in_place_through_their_zip_directory(server, local, tiny_qwen2, name, tmp_path,
                                                                      monkeypatch):
    from toolkit.sources.remote import torch_bin

    READ_AHEAD = 2048  # the tiny files are smaller than the default read-ahead of the zip directory and pickle
    monkeypatch.setattr(torch_bin, "READ_AHEAD", READ_AHEAD)
    kind = "bin_sharded" if "sharded" in name else "bin"
    where = name if name.startswith("tt/") else f"{server.url}/{name}"
    mark = server.mark()
    ds = toolkit.weight_stats(where, METRICS, progress=False)
    assert_same_values(ds, local[kind])
    assert not any((tmp_path / "hf").rglob("*.bin")), "nothing is downloaded into the HF cache"
    folder = tiny_qwen2[1][kind]
    files = list(folder.glob("*.bin"))
    matrices = sum(v.numel() * v.element_size() for k, v in tiny_qwen2[0].items() if k.endswith("_proj.weight"))
    moved = server.bytes_sent(mark, ".bin")
    headers = 128 * sum(k.endswith("_proj.weight") for k in tiny_qwen2[0])  # each record's local header, checked
    # the matrices, the directories, the pickles
    assert matrices <= moved <= matrices + 8 * READ_AHEAD * len(files) + headers
    mark = server.mark()
    one = toolkit.weight_stats(where, METRICS, progress=False, cache=False, layers=[2], components="mlp.down")
    assert_same_values(one, local[kind])
    down = tiny_qwen2[0]["model.layers.2.mlp.down_proj.weight"]
    moved = server.bytes_sent(mark, ".bin")
    assert moved <= down.numel() * down.element_size() + 8 * READ_AHEAD * len(files)
    assert moved < sum(f.stat().st_size for f in files) / 2


def test_a_legacy_bin_is_downloaded_from_the_hub_and_refused_from_a_url(server, local, tmp_path):
    with pytest.raises(NotReadableInPlaceError, match=r"legacy \(pre-zip\) torch file.*download=True"):
        toolkit.open_source(f"{server.url}/plain/legacy/pytorch_model.bin")
    ds = toolkit.weight_stats("tt/legacy", METRICS, progress=False)
    assert_same_values(ds, local["bin"])
    assert list((tmp_path / "hf").rglob("pytorch_model.bin")), "downloaded into the HF cache, as before"


def test_open_source_of_a_url_lists_records_without_reading_tensors(server, tiny_qwen2):
    mark = server.mark()
    src = toolkit.open_source(f"{server.url}/plain/single/model.safetensors")
    records = {r.name: r for r in src.tensors()}
    assert weights_bytes(server, mark) == header_bytes(tiny_qwen2[1]["single"])
    state = tiny_qwen2[0]
    name = "model.layers.2.mlp.down_proj.weight"
    assert torch.equal(records[name].read(), state[name])
    rows = torch.cat(list(records[name].row_blocks(max_entries=64)))
    assert torch.equal(rows, state[name])


def test_download_true_downloads_into_the_hub_cache(tmp_path, local):
    ds = toolkit.weight_stats("tt/single", METRICS, progress=False, download=True, cache=False)
    assert_same_values(ds, local["single"])
    assert list((tmp_path / "hf").rglob("model.safetensors"))
    src = toolkit.open_source("tt/single")  # now in the cache: read from disk
    assert os.path.exists(src.files()[0])


def test_download_is_refused_for_a_url_and_checked_for_type(server):
    with pytest.raises(SourceNotFoundError, match="download=True downloads hub repos"):
        toolkit.open_source(f"{server.url}/plain/single/model.safetensors", download=True)
    with pytest.raises(toolkit.errors.InvalidOptionError, match="download='yes' is not valid: download must be True or "
                       "False"):
        toolkit.open_source("tt/single", download="yes")


# ------------------------------------------------------------------ the result cache


def test_a_rerun_is_served_from_the_cache_reading_only_headers(server, tiny_qwen2):
    toolkit.weight_stats("tt/sharded", METRICS, progress=False)
    mark = server.mark()
    toolkit.weight_stats("tt/sharded", METRICS, progress=False)
    assert weights_bytes(server, mark) == header_bytes(tiny_qwen2[1]["sharded"])


def test_a_new_commit_on_the_server_is_a_miss_never_a_stale_hit(server, proxy, tiny_qwen2, tmp_path):
    state, folders = tiny_qwen2
    toolkit.weight_stats("tt/single", METRICS, progress=False)
    changed = tmp_path / "changed"
    shutil.copytree(folders["single"], changed)
    from safetensors.torch import save_file

    new = {k: (v * 2 if k.endswith("q_proj.weight") else v) for k, v in state.items()}
    save_file(new, changed / "model.safetensors", metadata={"format": "pt"})
    server.serve(lay_out_repo(server.root, "tt/single", changed, NEW_COMMIT, link=False))
    server.reload()
    try:
        ds = toolkit.weight_stats("tt/single", METRICS, progress=False)
        ref = toolkit.weight_stats(changed, METRICS, progress=False, cache=False)
        assert ds.attrs["revision"] == NEW_COMMIT
        assert_same_values(ds, ref)
        old = toolkit.weight_stats("tt/single", METRICS, progress=False, revision=COMMIT)
        assert old.attrs["revision"] == COMMIT
        assert not np.array_equal(old.frobenius_norm.values, ds.frobenius_norm.values)
    finally:
        server.serve(lay_out_repo(server.root, "tt/single", folders["single"], COMMIT))  # main: the old commit
        server.reload()


def test_a_rewritten_url_file_is_a_miss(server, tiny_qwen2, tmp_path):
    state, folders = tiny_qwen2
    plain = server.root / "plain" / "rewritten"
    shutil.copytree(folders["single"], plain)
    url = f"{server.url}/plain/rewritten/model.safetensors"
    first = toolkit.weight_stats(url, METRICS, progress=False)
    from safetensors.torch import save_file

    time.sleep(1.1)  # nginx's ETag holds the mtime in seconds
    save_file({k: (v * 2 if k.endswith("q_proj.weight") else v) for k, v in state.items()},
              plain / "model.safetensors", metadata={"format": "pt"})
    second = toolkit.weight_stats(url, METRICS, progress=False)
    ref = toolkit.weight_stats(plain, METRICS, progress=False, cache=False)
    assert_same_values(second, ref)
    assert second.attrs["fingerprint"] != first.attrs["fingerprint"]


# ------------------------------------------------------------------ faults


def test_a_server_that_ignores_range_is_refused_after_the_first_bytes(server, proxy):
    proxy.faults.append(Fault("ignore_range", path=".safetensors", times=None))
    mark = server.mark()
    with pytest.raises(RemoteReadError, match="ignores Range") as err:
        toolkit.open_source("tt/single")
    assert err.value.status == 200
    size = (server.root / "plain/single/model.safetensors").stat().st_size
    # nginx sends the whole file on each 200; the client stops after two (the probe, the header's rest)
    assert weights_bytes(server, mark) <= 2 * size


@pytest.mark.parametrize("kind", ["shorten", "drop"])
def test_a_short_body_or_a_dropped_connection_resumes_from_the_byte_reached(server, proxy, local, tiny_qwen2, kind):
    # every 5th tensor read: only its first 100 bytes arrive (a short 206, or a connection closed mid-body)
    proxy.faults.append(Fault(kind, path=".safetensors", keep=100, times=4, skip=3))
    mark = server.mark()
    remote_http.transfer_stats(reset=True)
    ds = toolkit.weight_stats("tt/single", METRICS, progress=False)
    assert_same_values(ds, local["single"])
    assert proxy.faults[0].used == 4
    folder = tiny_qwen2[1]["single"]
    wanted = header_bytes(folder) + tensor_bytes(folder, ("_proj.weight",))
    # the client received each byte once: every cut request is resumed from the byte it reached
    config = (folder / "config.json").stat().st_size
    stats = remote_http.transfer_stats()
    assert stats["bytes"] == wanted + config and stats["retries"] == 4
    assert weights_bytes(server, mark) >= wanted  # nginx sent whole ranges to the proxy, which cut them


def test_429_and_503_are_retried_honouring_retry_after(server, proxy, local):
    proxy.faults += [Fault("status", path=".safetensors", status=429, headers={"Retry-After": "1"}, times=1, skip=2),
                     Fault("status", path=".safetensors", status=503, times=2, skip=4)]
    start = time.monotonic()
    ds = toolkit.weight_stats("tt/single", METRICS, progress=False)
    assert time.monotonic() - start >= 1.0  # the Retry-After was waited for
    assert_same_values(ds, local["single"])
    assert [f.used for f in proxy.faults] == [1, 2]


def test_retries_are_bounded(server, proxy):
    proxy.faults.append(Fault("status", path=".safetensors", status=502, times=None))
    with pytest.raises(RemoteReadError, match="gave up after 6 attempts") as err:
        toolkit.open_source("tt/single")
    assert err.value.status == 502
    assert proxy.faults[0].used == remote_http.RETRIES + 1


def test_a_retry_after_longer_than_the_limit_is_an_error_naming_it(server, proxy):
    proxy.faults.append(Fault("status", path=".safetensors", status=429, headers={"Retry-After": "3600"}))
    with pytest.raises(RemoteReadError, match="asks to wait 3600 s"):
        toolkit.open_source("tt/single")


@pytest.mark.parametrize("status", [401, 403])
def test_a_gated_repo_says_how_to_log_in(server, proxy, status):
    proxy.faults.append(Fault("status", path=".safetensors", status=status, times=None))
    with pytest.raises(RemoteAccessError, match="hf auth login.*HF_TOKEN") as err:
        toolkit.open_source("tt/single")
    assert err.value.status == status
    assert isinstance(err.value, PermissionError)


def test_a_missing_file_is_source_not_found(server, proxy):
    with pytest.raises(SourceNotFoundError, match="HTTP 404"):
        toolkit.open_source(f"{server.url}/plain/nowhere/model.safetensors")
    proxy.faults.append(Fault("status", path="model.safetensors", status=404, times=None))
    with pytest.raises(SourceNotFoundError, match="HTTP 404"):
        toolkit.open_source("tt/single")


def test_a_commit_that_changes_mid_run_is_refused_and_nothing_is_cached(server, proxy, tmp_path):
    proxy.faults.append(Fault("header", path=".safetensors", headers={"X-Repo-Commit": NEW_COMMIT}, times=None,
                              skip=6))
    with pytest.raises(CheckpointChangedError, match="changed"):
        toolkit.weight_stats("tt/single", METRICS, progress=False)
    proxy.faults.clear()
    mark = server.mark()
    toolkit.weight_stats("tt/single", METRICS, progress=False)  # the version opened again: no stale refusal
    reads = [r for r in server.requests(mark) if r[1].endswith(".safetensors")]
    # the matrices read after the change was seen were not stored: read again (at most 4 came before it)
    assert 2 + 21 - 4 <= len(reads) <= 2 + 21


def test_an_etag_that_changes_mid_run_is_refused(server, proxy):
    proxy.faults.append(Fault("header", path="plain/sharded/model-0000", headers={"ETag": '"other"'}, times=None,
                              skip=5))
    with pytest.raises(CheckpointChangedError):
        toolkit.weight_stats(f"{proxy.url}/plain/sharded/", METRICS, progress=False)


def test_an_lfs_hash_that_changes_mid_run_is_refused(server, proxy):
    proxy.faults.append(Fault("header", path=".safetensors", headers={"X-Linked-Etag": '"' + "f" * 64 + '"'},
                              times=None, skip=3))
    with pytest.raises(CheckpointChangedError):
        toolkit.weight_stats("tt/single", METRICS, progress=False)


def test_a_header_longer_than_the_file_says_is_a_checkpoint_file_error(server, tiny_qwen2):
    plain = server.root / "plain" / "overlong"
    plain.mkdir(parents=True, exist_ok=True)
    data = (tiny_qwen2[1]["single"] / "model.safetensors").read_bytes()
    n = int.from_bytes(data[:8], "little")
    (plain / "model.safetensors").write_bytes(data[: 8 + n // 2])  # the header cut in half
    with pytest.raises(CheckpointFileError, match="truncated: the header alone needs"):
        toolkit.open_source(f"{server.url}/plain/overlong/model.safetensors")
    (plain / "model.safetensors").write_bytes(data[: len(data) - 10])  # the last tensor cut short
    with pytest.raises(CheckpointFileError, match="truncated"):
        toolkit.open_source(f"{server.url}/plain/overlong/model.safetensors")



# ------------------------------------------------------------------ Dask workers read their own ranges


@pytest.fixture(scope="module")
def cluster_client(proxy, tmp_path_factory):
    """A LocalCluster of 2 worker processes whose hub is the loopback server and whose HF cache is empty."""
    import distributed

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_ENDPOINT", proxy.url)
        mp.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("worker-hf")))
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=None)
        client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


@pytest.mark.parametrize("where", ["hub", "url", "signed"])
def test_dask_workers_read_their_own_ranges(server, proxy, cluster_client, local, tiny_qwen2, where, monkeypatch):
    location = "tt/sharded" if where == "hub" else f"{server.url}/plain/sharded/"
    if where == "signed":  # every request, the workers' too, must carry the signature; none is shown
        proxy.faults.append(Fault("require", path="/plain/sharded/", method="", needs="sig=SECRET", times=None))
        location = f"{proxy.url}/plain/sharded/?sig=SECRET&Expires=9"
    from toolkit.sources.remote import open as remote_open

    opened = []
    real = remote_open.RemoteSafetensorsSource.open

    def spy(*args, **kwargs):  # the driver's source: its records must never be read here
        src = real(*args, **kwargs)
        opened.append(src)
        src._filler = lambda file: forbidden
        return src

    def forbidden(offset, view):
        raise AssertionError("the driver read a tensor")

    monkeypatch.setattr(remote_open.RemoteSafetensorsSource, "open", spy)
    mark = server.mark()
    ds = toolkit.weight_stats(location, METRICS, progress=False, client=cluster_client)
    assert opened
    assert_same_values(ds, local["sharded"])
    assert "SECRET" not in repr(ds.attrs)
    folder = tiny_qwen2[1]["sharded"]
    headers, tensors = header_bytes(folder), tensor_bytes(folder, ("_proj.weight",))
    reads = [r for r in server.requests(mark) if r[1].endswith(".safetensors")]
    ranged = [r for r in reads if not r[4].startswith("bytes=0-")]
    # the driver and each worker that ran a task read the headers; each matrix was read once, by one worker
    assert headers + tensors <= sum(r[3] for r in reads) <= 3 * headers + tensors
    assert sum(r[3] for r in ranged) >= tensors


# ------------------------------------------------------------------ GGUF


@pytest.mark.parametrize("where", ["hub", "url"])
def test_a_gguf_file_is_read_in_place_header_then_tensor_ranges(server, smollm2_path, where):
    from toolkit.sources.gguf.table import read_gguf_table

    table = read_gguf_table(smollm2_path)
    q = next(t for t in table.tensors if t.name == "blk.3.attn_q.weight")
    header_end = min(t.start for t in table.tensors)
    location = "tt/gguf" if where == "hub" else f"{server.url}/plain/gguf/{smollm2_path.name}"
    mark = server.mark()
    ds = toolkit.weight_stats(location, METRICS, progress=False, layers=[3], components=["attn.q"],
                              gguf_file=smollm2_path.name if where == "hub" else None)
    ref = toolkit.weight_stats(smollm2_path, METRICS, progress=False, layers=[3], components=["attn.q"], cache=False)
    assert_same_values(ds, ref)
    moved = server.bytes_sent(mark, ".gguf")
    assert header_end + q.nbytes <= moved <= max(2 * header_end, 1 << 20) + q.nbytes
    assert ds.attrs["format"] == "gguf"
