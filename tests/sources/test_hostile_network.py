"""Hostile servers, round 3 (issue 35): each class of fault ends in the right number or a typed error, in bounded
time, and no secret of a URL reaches an attr, a saved file, a cache entry or a message.

nginx on loopback serves a tiny Qwen2 (a hub repo and plain folders); the fault proxy of ``_http_server``
sits in front of it and misbehaves by rule. Values are compared with ``torch.load`` and with a local read.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from test_zip_records import rezip

import toolkit
from _http_server import NGINX, Fault, FaultProxy, Nginx, lay_out_repo  # noqa: E402  (tests/ is on sys.path)
from toolkit.errors import CheckpointFileError, RemoteReadError, ToolkitError
from toolkit.sources.remote import http as remote_http
from toolkit.sources.remote.transport import MAX_REDIRECTS

if NGINX is None:
    if os.environ.get("CI"):
        raise RuntimeError("nginx is not installed: .ci/server-deps.sh installs it (Debian package nginx-light)")
    pytest.skip("nginx is not installed (apt-get install nginx-light, as .ci/server-deps.sh does)",
                allow_module_level=True)

COMMIT = "3" * 40
METRICS = ["frobenius_norm"]
SECRETS = ("s3cretPW", "SIGSECRET", "CREDSECRET", "TOKSECRET")


@pytest.fixture(scope="module")
def folders(tiny_qwen2, tmp_path_factory) -> dict[str, Path]:
    """The tiny Qwen2's ``single`` (safetensors) and ``bin`` folders, and ``deflated``: the ``.bin`` with every
    zip record deflated."""
    _, base = tiny_qwen2
    deflated = tmp_path_factory.mktemp("deflated") / "deflated"
    shutil.copytree(base["bin"], deflated)
    rezip(base["bin"] / "pytorch_model.bin", deflated / "pytorch_model.bin")
    return {"single": base["single"], "bin": base["bin"], "deflated": deflated}


@pytest.fixture(scope="module")
def server(tmp_path_factory, folders):
    tmp = tmp_path_factory.mktemp("hostile_http")
    root = tmp / "www"
    ng = Nginx(root, tmp / "nginx")
    for name, folder in folders.items():
        ng.serve(lay_out_repo(root, f"h3/{name}", folder, COMMIT))
        shutil.copytree(folder, root / "plain" / name)
    ng.start()
    yield ng
    ng.stop()


@pytest.fixture(scope="module")
def proxy(server):
    p = FaultProxy(server.port).start()
    yield p
    p.stop()


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch, proxy):
    """The hub is the proxy; empty caches; fast backoff; a 1 s rate window (the defaults are 30 s)."""
    monkeypatch.setenv("HF_ENDPOINT", proxy.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TOOLKIT_HTTP_RATE_WINDOW", "1")
    monkeypatch.setenv("TOOLKIT_HTTP_MIN_RATE", "200")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(remote_http, "BACKOFF", 0.01)
    proxy.faults.clear()
    proxy.seen.clear()
    yield
    proxy.faults.clear()


@pytest.fixture(scope="module")
def local(folders):
    return {name: toolkit.weight_stats(folder, METRICS, progress=False, cache=False)
            for name, folder in folders.items()}


def same_values(ds, ref):
    np.testing.assert_array_equal(ds.frobenius_norm.values,
                                  ref.frobenius_norm.sel(layer=ds.layer, component=ds.component).values)


# ------------------------------------------------------------------ class 1: a deflated .bin over HTTP


def test_a_deflated_bin_on_the_hub_gives_torch_loads_values(folders, local, tmp_path):
    """torch's record offsets of a deflated ``.bin`` are not where the data lies: never read by range; the hub
    repo is downloaded and loaded as torch.load loads it."""
    ref = torch.load(folders["deflated"] / "pytorch_model.bin", weights_only=True)
    src = toolkit.open_source("h3/deflated")
    assert list((tmp_path / "hf").rglob("pytorch_model.bin")), "downloaded, not read by range"
    for record in src.tensors():
        assert torch.equal(record.read(), ref[record.stored_name or record.name]), record.name
    ds = toolkit.weight_stats("h3/deflated", METRICS, progress=False)
    same_values(ds, local["bin"])  # the deflated file holds the same tensors as the stored one
    q = ref["model.layers.1.self_attn.q_proj.weight"].double()
    assert float(ds.frobenius_norm.sel(layer=1, component="attn.q")) == pytest.approx(
        torch.linalg.matrix_norm(q).item(), rel=1e-6)


def test_a_deflated_bin_behind_a_url_is_refused_saying_how_to_resave(proxy):
    from toolkit.errors import NotReadableInPlaceError

    with pytest.raises(NotReadableInPlaceError, match="zip records are compressed.*download=True.*torch.save"):
        toolkit.open_source(f"{proxy.url}/plain/deflated/pytorch_model.bin")


def test_a_record_whose_bytes_differ_from_its_crc_is_refused(proxy, server, folders):
    """A record read whole over HTTP is checked (its local header, its CRC-32): flipped bytes are not measured."""
    proxy.faults.append(Fault("corrupt", path="plain/bin/pytorch_model.bin", skip=40, times=None))
    src = toolkit.open_source(f"{proxy.url}/plain/bin/pytorch_model.bin")
    with pytest.raises(CheckpointFileError, match="CRC-32|no local header"):
        for record in src.tensors():
            record.read()


# ------------------------------------------------------------------ class 2: a server that drips


@pytest.mark.parametrize("where", ["hub", "url"])
def test_a_dripping_server_ends_in_a_typed_error_within_the_window(proxy, where):
    proxy.faults.append(Fault("drip", path="config.json", interval=0.1, times=None))
    location = "h3/single" if where == "hub" else f"{proxy.url}/plain/single/model.safetensors"
    start = time.monotonic()
    with pytest.raises(RemoteReadError, match=r"slower than the minimum of 200 bytes/s \(TOOLKIT_HTTP_MIN_RATE"):
        toolkit.weight_stats(location, METRICS, progress=False)
    assert time.monotonic() - start < 8  # one 1 s window (and a byte's wait), not the 60 s read timeout per byte
    assert proxy.faults[0].used == 1  # a server that slow is not asked again


@pytest.mark.parametrize("where", ["hub", "url"])
def test_a_server_that_drips_its_headers_ends_in_a_typed_error(proxy, monkeypatch, where):
    """The client's timeouts bound each wait for bytes; the whole answer's head is bounded too."""
    monkeypatch.setenv("TOOLKIT_HTTP_TIMEOUT", "1")
    proxy.faults.append(Fault("slow_headers", path="single/", method="", interval=0.1, times=None))
    location = "h3/single" if where == "hub" else f"{proxy.url}/plain/single/model.safetensors"
    start = time.monotonic()
    with pytest.raises(RemoteReadError, match=r"no complete answer .* within 1 s \(TOOLKIT_HTTP_TIMEOUT\)"):
        toolkit.open_source(location)
    assert time.monotonic() - start < 5
    assert proxy.faults[0].used == 1


def test_the_limits_are_checked(monkeypatch, proxy):
    from toolkit.errors import InvalidOptionError

    monkeypatch.setenv("TOOLKIT_HTTP_MIN_RATE", "-3")
    with pytest.raises(InvalidOptionError, match="TOOLKIT_HTTP_MIN_RATE='-3' is not valid"):
        toolkit.open_source(f"{proxy.url}/plain/single/model.safetensors")


# ------------------------------------------------------------------ class 3: secrets in URLs


def _secret_url(proxy, path: str) -> str:
    host = proxy.url.split("://", 1)[1]
    return (f"http://reader:s3cretPW@{host}/{path}?X-Amz-Signature=SIGSECRET&X-Amz-Credential=CREDSECRET"
            "&token=TOKSECRET&Expires=99")


def _no_secret(text, where: str):
    for s in SECRETS:
        assert s not in text, f"{s} in {where}: {text[:300]!r}"


def test_a_signed_url_is_read_with_its_query_and_shown_without_its_secrets(proxy, local, tmp_path, capsys, caplog):
    import base64

    auth = "Basic " + base64.b64encode(b"reader:s3cretPW").decode()
    # the server refuses any request without the signature or the credentials: every request carries them
    proxy.faults.append(Fault("require", path="/plain/single/", method="", needs="X-Amz-Signature=SIGSECRET",
                              auth=auth, times=None))
    url = _secret_url(proxy, "plain/single/model.safetensors")
    ds = toolkit.weight_stats(url, METRICS, progress=True)
    same_values(ds, local["single"])
    assert {p.split("?")[0].rsplit("/", 1)[1] for _, p, _ in proxy.seen} == {"model.safetensors", "config.json"}
    assert all("X-Amz-Signature=SIGSECRET" in p and a == auth for _, p, a in proxy.seen)
    assert ds.attrs["source"].startswith("http://***@127.0.0.1:") and "X-Amz-Signature=***" in ds.attrs["source"]
    assert "Expires=99" in ds.attrs["source"]  # what is no secret stays
    _no_secret(repr(ds.attrs), "attrs")
    _no_secret(repr(ds.coords), "coords")
    out = tmp_path / "stats.nc"
    toolkit.save(ds, out)
    _no_secret(out.read_bytes().decode("latin-1"), "the saved NetCDF")
    for f in (tmp_path / "cache").rglob("*"):
        if f.is_file():
            _no_secret(f.read_bytes().decode("latin-1"), f"cache entry {f}")
    captured = capsys.readouterr()
    _no_secret(captured.out + captured.err, "progress")
    _no_secret(caplog.text, "logs")
    src = toolkit.open_source(url)
    _no_secret(repr(src) + src.location + " ".join(src.files()) + str(src.fingerprint), "the source")


def test_no_message_shows_a_secret(proxy):
    for path in ("plain/nowhere/model.safetensors", "plain/single/"):
        proxy.faults[:] = [Fault("status", path="/plain/", method="", status=500 if "single" in path else 404,
                                 times=None)]
        with pytest.raises(ToolkitError) as err:
            toolkit.weight_stats(_secret_url(proxy, path), METRICS, progress=False)
        _no_secret(str(err.value) + repr(err.value.__dict__), "the message")
        assert "***@127.0.0.1" in str(err.value)


def test_one_redaction():
    from toolkit.redaction import redact, redact_text

    url = "https://u:p@h.example/m/model.safetensors?Signature=S&Key-Pair-Id=K&Policy=P&sig=s&access_token=a&v=1#x"
    assert redact(url) == ("https://***@h.example/m/model.safetensors?Signature=***&Key-Pair-Id=***&Policy=***"
                           "&sig=***&access_token=***&v=1#***")
    assert redact(redact(url)) == redact(url)
    assert redact_text(f"cannot read {url!r}: no") == f"cannot read {redact(url)!r}: no"
    assert redact("org/model") == "org/model"


# ------------------------------------------------------------------ class 4: redirect loops and schemes


@pytest.mark.parametrize("where, path, method", [
    ("url", "plain/single/model.safetensors", "GET"),  # a plain URL's range GET
    ("url", "plain/single/model.safetensors", "HEAD"),  # a URL folder's HEAD
    ("hub", "/h3/single/resolve/", "GET"),  # the hub's resolve (a range GET)
    ("hub", "/api/models/h3/single", "GET"),  # the hub API (the listing)
])
@pytest.mark.parametrize("loop", ["{path}", "{path}&again"])
def test_a_redirect_loop_is_a_typed_error_naming_it(proxy, where, path, method, loop):
    proxy.faults.append(Fault("redirect", path=path.lstrip("/") if where == "url" else path, method=method,
                              status=302, location=loop, times=None))
    location = "h3/single" if where == "hub" else f"{proxy.url}/{path}"
    with pytest.raises(RemoteReadError, match="a redirect loop|more than 10 redirects") as err:
        toolkit.open_source(location)
    assert " -> " in str(err.value)  # the hops are named
    assert proxy.faults[0].used <= MAX_REDIRECTS + 1  # followed once, never retried


def test_the_hub_token_never_follows_a_redirect_to_another_origin(proxy, local, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_" + "T0KEN" * 8)
    proxy.faults.append(Fault("redirect", path="/h3/single/resolve/", status=302, times=None,
                              location=f"http://localhost:{proxy.port}/plain/single/{{name}}?cdn=1"))
    ds = toolkit.weight_stats("h3/single", METRICS, progress=False, cache=False)
    same_values(ds, local["single"])
    hub = [a for _, p, a in proxy.seen if "/resolve/" in p and "cdn=1" not in p]
    cdn = [a for _, p, a in proxy.seen if "cdn=1" in p]
    assert hub and cdn and all(a == "Bearer hf_" + "T0KEN" * 8 for a in hub) and not any(cdn)


@pytest.mark.parametrize("target", ["file:///etc/passwd", "ftp://127.0.0.1/model.safetensors"])
@pytest.mark.parametrize("where", ["url", "hub"])
def test_a_redirect_to_another_scheme_is_permanent(proxy, target, where):
    proxy.faults.append(Fault("redirect", path="single/", method="", status=302, location=target, times=None))
    location = "h3/single" if where == "hub" else f"{proxy.url}/plain/single/model.safetensors"
    with pytest.raises(RemoteReadError, match="never followed") as err:
        toolkit.open_source(location)
    assert "try again later" not in str(err.value).lower()
    assert proxy.faults[0].used == 1


# ------------------------------------------------------------------ class 5: sizes the server states


@pytest.mark.parametrize("where, method", [("url", "HEAD"), ("hub", "GET")])
def test_a_huge_stated_size_is_checked_before_anything_is_allocated(proxy, where, method):
    import tracemalloc

    path = "plain/single/config.json" if where == "url" else "/api/models/h3/single"
    proxy.faults.append(Fault("claim", path=path, method=method, size=2 ** 60, times=None))
    location = "h3/single" if where == "hub" else f"{proxy.url}/plain/single/model.safetensors"
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointFileError, match=f"is {2 ** 60} bytes as the server states it.*"
                                                      "TOOLKIT_MAX_WHOLE_FILE"):
            toolkit.open_source(location)
        assert tracemalloc.get_traced_memory()[1] < 64 << 20
    finally:
        tracemalloc.stop()


def test_a_whole_file_over_the_cap_is_refused(proxy, monkeypatch):
    monkeypatch.setenv("TOOLKIT_MAX_WHOLE_FILE", "100")  # config.json is larger
    with pytest.raises(CheckpointFileError, match="more than the 100 bytes a file read whole"):
        toolkit.open_source(f"{proxy.url}/plain/single/model.safetensors")


# ------------------------------------------------------------------ class 7: what is verified


def test_a_whole_file_is_checked_against_the_hubs_hash(proxy):
    proxy.faults.append(Fault("corrupt", path="/h3/single/resolve/", times=None))  # config.json, then headers
    with pytest.raises(RemoteReadError, match="hash to sha256 .* the hub lists"):
        toolkit.open_source("h3/single")


# ------------------------------------------------------------------ random fault sequences


def _fault_strategy():
    from hypothesis import strategies as st

    where = st.sampled_from(["model.safetensors", "config.json", ""])
    method = st.sampled_from(["GET", "HEAD", ""])
    common = dict(path=where, method=method, skip=st.integers(0, 6), times=st.sampled_from([1, 2, None]))
    return st.one_of(
        st.builds(Fault, st.just("status"), status=st.sampled_from([404, 429, 500, 503, 403]),
                  headers=st.sampled_from([{}, {"Retry-After": "0"}]), **common),
        st.builds(Fault, st.just("drop"), keep=st.integers(0, 200), **common),
        st.builds(Fault, st.just("shorten"), keep=st.integers(1, 200), **common),
        st.builds(Fault, st.just("ignore_range"), **common),
        st.builds(Fault, st.sampled_from(["drip", "slow_headers"]), interval=st.just(0.05), **common),
        st.builds(Fault, st.just("claim"), size=st.sampled_from([0, 7, 2 ** 40, 2 ** 60]), **common),
        # flipped bytes of a config (no JSON); a tensor range's cannot be seen (the README says so)
        st.builds(Fault, st.just("corrupt"), **{**common, "path": st.just("config.json")}),
        st.builds(Fault, st.just("redirect"), status=st.sampled_from([301, 302, 307, 308]),
                  location=st.sampled_from(["{path}", "file:///etc/passwd", "ftp://x/y", "{path}?n=1"]), **common),
        st.builds(Fault, st.just("header"), headers=st.sampled_from([{"ETag": '"other"'}, {"Content-Encoding": "gzip"},
                                                                     {"Content-Range": "bytes 0-0/1"}]), **common),
    )


def test_random_fault_sequences_end_in_the_right_number_or_a_typed_error(proxy, local, monkeypatch):
    """Up to 3 random faults per run against the real server: the values of a local read, or a ToolkitError,
    each run within a bound, never a raw exception and never other numbers."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    monkeypatch.setenv("TOOLKIT_HTTP_TIMEOUT", "2")  # a dripped head gives up after 2 s, not 60
    url = f"{proxy.url}/plain/single/model.safetensors"
    ref = local["single"]
    deadline = time.monotonic() + 30

    @settings(max_examples=25, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(_fault_strategy(), max_size=3))
    def run(faults):
        if time.monotonic() > deadline:
            return  # the suite's time: the examples drawn so far ran
        proxy.faults[:] = faults
        start = time.monotonic()
        try:
            ds = toolkit.weight_stats(url, METRICS, progress=False, cache=False)
        except ToolkitError:
            pass
        else:
            same_values(ds, ref)
        finally:
            proxy.faults.clear()
        assert time.monotonic() - start < 15, faults

    run()
