"""Secrets a redaction has never heard of (issue 43): every query value of a URL source is masked by default,
names compared after percent-decoding, and no secret reaches an output channel: attrs, the saved NetCDF, cache
file names and contents, exception messages (and their chains), progress and logs.

The secret names are generated: random names, percent-encoded names, upper case, and the signing schemes a word
list missed (Akamai ``hdnts``, nginx secure_link ``md5``, ``jwt``).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import string
import subprocess
import sys
from pathlib import Path

import pytest

import toolkit
from _http_server import NGINX, Nginx  # noqa: E402  (tests/ is on sys.path)
from toolkit.errors import ToolkitError
from toolkit.redaction import MASK, is_secret_parameter, redact, redact_text

METRICS = ["frobenius_norm"]


def _encoded(name: str) -> str:
    return "".join(f"%{ord(c):02X}" if i % 2 == 0 else c for i, c in enumerate(name))


def secret_parameters(seed: int, n: int = 12) -> list[tuple[str, str]]:
    """``(name as written in the URL, secret value)`` pairs: known schemes, random names, percent-encoded and
    upper-case spellings; each value unique and long enough that finding it anywhere is a leak."""
    rng = random.Random(seed)
    names = ["sig", "hdnts", "md5", "jwt", "token", "SIG", "X-Amz-Signature", "%73ig", "Policy", "auth"]
    names += ["".join(rng.choices(string.ascii_letters, k=rng.randint(1, 9))) for _ in range(n)]
    names += [_encoded(nm) for nm in names[:6]] + [nm.upper() for nm in names[10:14]]
    out = []
    for i, name in enumerate(names):
        if name.casefold() in ("expires", "v", "download", "revision") or not is_secret_parameter(name):
            continue
        out.append((name, f"Q{i}x" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=14))))
    return out


def secret_url(base: str, params: list[tuple[str, str]], password: str) -> str:
    scheme, _, rest = base.partition("://")
    query = "&".join(f"{k}={v}" for k, v in params)
    return f"{scheme.upper()}://reader:{password}@{rest}?{query}&Expires=99#frag={password}F"


@pytest.mark.parametrize("seed", range(20))
def test_every_generated_secret_is_masked_and_harmless_names_stay(seed):
    params = secret_parameters(seed)
    url = secret_url("https://h.example/m/model.safetensors", params, "PW" + str(seed) * 6)
    shown = redact(url)
    for _, value in params:
        assert value not in shown
    assert "PW" + str(seed) * 6 not in shown
    assert shown.startswith(f"HTTPS://{MASK}@h.example/m/model.safetensors?")
    assert "&Expires=99#frag=***" in shown
    assert redact(shown) == shown
    for name, _ in params:
        assert f"{name}={MASK}" in shown
    assert redact_text(f"cannot read {url!r}") == f"cannot read {shown!r}"


def test_names_are_compared_after_percent_decoding_and_case_folding():
    assert is_secret_parameter("%73ig") and is_secret_parameter("hdnts") and is_secret_parameter("zzz")
    assert not is_secret_parameter("EXPIRES") and not is_secret_parameter("X-Amz-%44ate")
    assert redact("http://h/f?S3CR3T") == "http://h/f?***"  # a parameter without '=' is all value
    assert redact("http://h/f?versionId=7&md5=abc") == "http://h/f?versionId=7&md5=***"


@pytest.mark.parametrize("value", ["ab'SECRET", 'ab"SECRET', "ab'SE'CRET"])
def test_a_query_value_with_a_quote_is_masked_in_running_text(value):
    url = f"https://h.example/m/model.safetensors?sig={value}&Expires=9"
    for text in (f"cannot read {url!r}: no", f"cannot read {url}. No", f"({url})"):
        shown = redact_text(text)
        assert "SECRET" not in shown and "CRET" not in shown and "sig=***&Expires=9" in shown, shown


@pytest.mark.parametrize("password", ["pa'ss", 'pa"ss', "p@ss", "p`ss", "pa<ss"])
def test_a_password_that_ends_a_url_in_running_text_is_masked(password):
    url = f"http://user:{password}@h.example/m/model.safetensors?X=1"
    for text in (f"cannot read {url!r}: no", f"cannot read {url}: no", f'"{url}"'):
        shown = redact_text(text)
        assert password not in shown and "ss@" not in shown and "***@h.example/m/model.safetensors" in shown, shown


def test_an_upper_case_scheme_is_a_url():
    from toolkit.sources.remote import is_url

    assert is_url("HTTP://host/m/model.safetensors") and is_url("HtTpS://host/m/")
    assert not is_url("org/model") and not is_url("ftp://host/x")


def test_offline_mode_is_a_typed_error_without_the_secret(tmp_path):
    """huggingface_hub's ``OfflineModeIsEnabled`` names the URL, password and signature included: it ends in a
    typed error that names neither, nor chains the raw exception. (A child process: the hub client reads
    ``HF_HUB_OFFLINE`` once, at import.)"""
    params = secret_parameters(1)
    url = secret_url("http://127.0.0.1:9/m/model.safetensors", params, "OFFLINEPW")
    code = (
        "import traceback, toolkit\n"
        "from toolkit.errors import ToolkitError\n"
        "try:\n"
        f"    toolkit.weight_stats({url!r}, ['frobenius_norm'], progress=False)\n"
        "except ToolkitError as e:\n"
        "    traceback.print_exc(); print('TYPED', e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLKIT_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": str(Path(toolkit.__file__).parents[1])}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "TYPED cannot read 'HTTP://***@127.0.0.1:9/" in run.stdout, run.stdout + run.stderr
    assert "HF_HUB_OFFLINE=1 forbids every request" in run.stdout
    _no_secret(run.stdout + run.stderr, params, "OFFLINEPW", "the offline error and its traceback")


def _chain_text(exc: BaseException) -> str:
    parts = []
    while exc is not None:
        parts.append(f"{exc!s} {exc!r} {getattr(exc, '__dict__', {})!r}")
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return " ".join(parts)


def _no_secret(text: str, params, password: str, where: str):
    for _, value in params:
        assert value not in text, f"{value} in {where}: {text[:300]!r}"
    assert password not in text, f"the password in {where}"


@pytest.fixture(scope="module")
def server(tiny_qwen2, tmp_path_factory):
    if NGINX is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light, as .ci/server-deps.sh does)")
    _, base = tiny_qwen2
    tmp = tmp_path_factory.mktemp("secret_http")
    shutil.copytree(base["single"], tmp / "www" / "plain" / "single")
    ng = Nginx(tmp / "www", tmp / "nginx")
    ng.start()
    yield ng
    ng.stop()


@pytest.mark.parametrize("seed", [0, 7])
def test_no_output_channel_holds_a_generated_secret(server, seed, tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    caplog.set_level(logging.DEBUG, logger="toolkit")  # the toolkit's own logs, every level
    caplog.set_level(logging.WARNING)  # a dependency's warnings (httpx logs each request's URL at INFO, as given)
    params, password = secret_parameters(seed), f"PASS{seed}WORD"
    url = secret_url(f"{server.url}/plain/single/model.safetensors", params, password)
    ds = toolkit.weight_stats(url, METRICS, progress=True)
    assert float(ds.frobenius_norm.max()) > 0
    assert ds.attrs["source"].startswith(f"HTTP://{MASK}@127.0.0.1:") and "Expires=99" in ds.attrs["source"]
    _no_secret(repr(ds.attrs) + repr(ds.coords), params, password, "attrs")
    out = tmp_path / "stats.nc"
    toolkit.save(ds, out)
    _no_secret(out.read_bytes().decode("latin-1"), params, password, "the saved NetCDF")
    for f in Path(tmp_path / "cache").rglob("*"):
        _no_secret(str(f.relative_to(tmp_path)), params, password, "a cache name")
        if f.is_file():
            _no_secret(f.read_bytes().decode("latin-1"), params, password, f"cache entry {f}")
    missing = secret_url(f"{server.url}/plain/nowhere/model.safetensors", params, password)
    with pytest.raises(ToolkitError) as info:
        toolkit.weight_stats(missing, METRICS, progress=True)
    _no_secret(_chain_text(info.value), params, password, "the error")
    captured = capsys.readouterr()
    _no_secret(captured.out + captured.err, params, password, "progress")
    _no_secret(caplog.text, params, password, "logs")
