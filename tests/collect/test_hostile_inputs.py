"""Hostile and broken inputs at the toolkit's own front doors (issue 14): every one a typed error
naming the input and the way out, or the right number; bounded memory; no traceback on the command line.

Weight files and source arguments are tested with the sources (test_sources_*).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

import toolkit
from toolkit.activations import activation_stats, load_prompts
from toolkit.atomic import STALE_AFTER_S, atomic_dir, remove_stale_temps
from toolkit.errors import (
    InvalidOptionError,
    OutputPathError,
    ResultsFileError,
    ResultsNotFoundError,
    TextFileNotFoundError,
    TextInputError,
    ToolkitError,
    UnsavableDatasetError,
)
from toolkit.io import load, save
from toolkit.testing import tiny_model, write_tiny_checkpoint

ROOT = Path(__file__).resolve().parents[2]
IDS = [[5, 9, 33, 4, 70], [6, 7, 8]]


@pytest.fixture(autouse=True)
def _cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "m", "llama", num_layers=2)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", num_layers=1)


def _ds():
    ds = xr.Dataset({"stable_rank": (("layer", "component"), np.arange(6.0).reshape(3, 2), {"units": "1"})},
                    coords={"layer": [0, 1, 2], "component": ["attn.q", "attn.k"]})
    ds.attrs.update(source="x", config={"a": 1})
    return ds


# ------------------------------------------------------------------ options --

@pytest.mark.parametrize("kw, expected", [
    (dict(k=0), "k=0 is not valid: k must be a whole number >= 1 (the subspace dimension"),
    (dict(k=-3), "k=-3 is not valid"),
    (dict(k=2.5), "k=2.5 is not valid: k must be a whole number"),
    (dict(k=True), "k=True is not valid"),
    (dict(k="4"), "pass 4 (an int, not a str)"),
    (dict(tolerance=-1e-3), "tolerance=-0.001 is not valid: tolerance must be a finite number >= 0"),
    (dict(tolerance=float("nan")), "tolerance=nan is not valid"),
    (dict(tolerance=float("inf")), "tolerance=inf is not valid"),
    (dict(tolerance="0.1"), "pass 0.1 (a float, not a str)"),
    (dict(metrics=[]), "an empty list selects nothing to compute"),
    (dict(progress="yes"), "progress must be True (a progress bar), False (none) or a callable"),
    (dict(cache="no"), "cache must be True or False"),
    (dict(mapping=3), "mapping must be None, a toolkit.Mapping"),
])
def test_compare_refuses_bad_options_before_opening_anything(kw, expected):
    with pytest.raises(InvalidOptionError, match=expected.replace("(", r"\(").replace(")", r"\)")) as err:
        toolkit.compare("/no/such/base", "/no/such/target", **{"progress": False, **kw})  # before the sources
    assert str(err.value).startswith("toolkit.compare: ")
    assert isinstance(err.value, ValueError) and isinstance(err.value, ToolkitError)
    assert err.value.option == next(iter(kw))


def test_compare_records_the_values_it_used(ckpt):
    ds = toolkit.compare(ckpt, ckpt, ["subspace_overlap", "update_sparsity"], k=np.int64(3), tolerance=np.float32(0.5),
                         progress=False)
    assert ds.attrs["subspace_k"] == 3 and type(ds.attrs["subspace_k"]) is int
    assert ds.attrs["tolerance"] == 0.5
    assert float(ds.update_sparsity.sel(layer=0, component="attn.q")) == 1.0


def test_compare_series_refuses_bad_arguments(ckpt):
    where = "toolkit.compare_series: "
    cases = [
        (dict(checkpoints=str(ckpt)), "checkpoints must be a list of checkpoints in training order"),
        (dict(checkpoints=ckpt), "checkpoints must be a list"),
        (dict(steps=[1.5, 2]), r"steps\[0\]=1.5 is not valid: steps\[0\] must be a whole number >= 0"),
        (dict(steps=[10, 10]), r"steps must be distinct training steps, one per checkpoint \(10 is given twice\)"),
        (dict(steps=[-1, 2]), r"steps\[0\]=-1 is not valid"),
        (dict(steps="ab"), "steps must be None or a list of whole numbers"),
        (dict(reference=None), "reference must be one of 'first', 'previous'"),
        (dict(k=0), "k=0 is not valid"),
        (dict(tolerance=float("nan")), "tolerance=nan is not valid"),
    ]
    for kw, expected in cases:
        kw = {"checkpoints": [ckpt, ckpt], **kw}
        with pytest.raises(InvalidOptionError, match=expected) as err:
            toolkit.compare_series(progress=False, **kw)
        assert str(err.value).startswith(where), kw
    with pytest.raises(InvalidOptionError, match="2 steps for 1 checkpoints"):
        toolkit.compare_series([ckpt], steps=[0, 1], progress=False)


def test_weight_stats_refuses_bad_options_before_opening_anything():
    for kw, expected in [(dict(metrics=[]), "metrics=\\[\\] is not valid"), (dict(progress=2), "progress=2"),
                         (dict(cache=None), "cache=None is not valid"), (dict(mapping="llama"), "mapping='llama'")]:
        with pytest.raises(InvalidOptionError, match=expected) as err:
            toolkit.weight_stats("/no/such/model", **{"progress": False, **kw})
        assert str(err.value).startswith("toolkit.weight_stats: ")


@pytest.mark.parametrize("kw, expected", [
    (dict(max_tokens=1), "max_tokens=1 is not valid: max_tokens must be a whole number >= 2"),
    (dict(max_tokens=64.0), r"pass 64 \(an int\)"),
    (dict(batch_size=0), "batch_size=0 is not valid: batch_size must be a whole number >= 1"),
    (dict(attention="no"), "attention='no' is not valid: attention must be True or False"),
    (dict(gradients=1), "gradients=1 is not valid"),
    (dict(tokenizer="gpt2"), "tokenizer must be None or a transformers tokenizer"),
])
def test_activation_stats_refuses_bad_options_before_loading(kw, expected):
    with pytest.raises(InvalidOptionError, match=expected) as err:
        activation_stats("/no/such/model", IDS, progress=False, **kw)
    assert str(err.value).startswith("toolkit.activation_stats: ")


# -------------------------------------------------------------------- texts --

@pytest.mark.parametrize("texts, where, expected", [
    (b"hello", "texts", "is bytes (b'hello'), not text: decode them first, e.g. texts=data.decode('utf-8')"),
    (bytearray(b"hi"), "texts", "decode them first"),
    ([b"ab", b"cd"], "text 0 (b'ab')", "is bytes, not str: decode it first"),
    (["a text", [1, 2, 3]], "texts", "mix strings (text 0) and token ids (text 1): pass all texts as str"),
    ([[1, 2], "a text"], "texts", "mix strings (text 1) and token ids (text 0)"),
    (["ok", "bad \ud800 text"], "text 1 ('bad \\ud800 text')", "holds a lone surrogate '\\ud800' at character 4"),
    ([[5, 6, 1.5]], "text 0", "holds 1.5 at position 2, which is not a token id"),
    ([[True, 2]], "text 0", "holds True at position 0, which is not a token id"),
    (42, "texts", "is of type int (42); pass a str, a list of str, token ids"),
    ({"a": "b"}, "texts", "is of type dict"),
    ({"a", "b"}, "texts", "is of type set"),
    ([None], "text 0 (None)", "is of type NoneType"),
    ([np.array([[1, 2]])], "text 0", "is an array of shape (1, 2)"),
    ([np.array([1.0, 2.0])], "text 0", "holds float64 values; token ids are whole numbers"),
])
def test_texts_that_are_not_text_are_typed_errors(texts, where, expected, model):
    """One contract: an InvalidOptionError naming the front door and ``texts``, with what was found (the text,
    the reason) before the model is touched."""
    with pytest.raises(InvalidOptionError) as err:
        activation_stats(model, texts, progress=False)
    assert (err.value.where, err.value.option) == ("toolkit.activation_stats", "texts")
    assert f"({where} " in str(err.value) and expected in str(err.value), str(err.value)


@pytest.mark.parametrize("ids, bad, pos", [([[5, 6, 10**6]], 10**6, 2), ([[5, -1, 3]], -1, 1),
                                           ([[3, 4], [128, 1]], 128, 0)])
def test_token_ids_outside_the_vocabulary(ids, bad, pos, model):
    assert model.get_input_embeddings().num_embeddings == 128
    with pytest.raises(TextInputError, match=f"holds token id {bad} at position {pos}, outside the model's "
                                             r"vocabulary \(ids 0 to 127; ids run from 0"):
        activation_stats(model, ids, progress=False)


def test_a_tokenizer_of_a_bigger_vocabulary_is_named(model):
    def tokenizer(text, **kw):  # e.g. the tokenizer of another model
        return {"input_ids": [1, 500, 2]}

    with pytest.raises(TextInputError, match="token id 500 at position 1.*the tokenizer gave it: a tokenizer of "
                                             "another model"):
        activation_stats(model, ["hello"], tokenizer=tokenizer, progress=False)


def test_arrays_of_token_ids_are_accepted(model):
    import torch

    a = activation_stats(model, np.array([[5, 9, 33], [6, 7, 8]]), progress=False, gradients=False)
    b = activation_stats(model, [torch.tensor([5, 9, 33]), [6, 7, 8]], progress=False, gradients=False)
    assert a.attrs["num_tokens"] == b.attrs["num_tokens"] == 6
    np.testing.assert_array_equal(a.output_rms.values, b.output_rms.values)


def test_a_prompts_file_that_is_not_utf8(tmp_path, model):
    p = tmp_path / "prompts.txt"
    p.write_bytes("caf\u00e9 au lait\n---\nna\u00efve\n".encode("latin-1"))
    with pytest.raises(TextInputError) as err:
        activation_stats(model, p, progress=False)
    msg = str(err.value)
    assert msg.startswith(f"prompts file {str(p)!r} is not UTF-8 text (bytes e9 20 61 75 at offset 3 are not UTF-8)")
    assert "iconv -f latin1 -t utf-8 prompts.txt > prompts.utf8.txt" in msg and "list of str" in msg
    with pytest.raises(TextFileNotFoundError, match="no text file .*: no such prompts file; check the path") as err:
        load_prompts(tmp_path / "missing.txt")
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, TextInputError)
    with pytest.raises(TextFileNotFoundError, match="it is a folder, not a prompts file"):
        load_prompts(tmp_path)


# ------------------------------------------------------------------ load() --

def _saved(tmp_path, name="a.nc"):
    return save(_ds(), tmp_path / name)


def _rewrite_attrs(path, out, **changes):
    """A copy of a saved file with root attrs changed (h5py: exactly these attrs, nothing re-encoded)."""
    out.write_bytes(path.read_bytes())
    with h5py.File(out, "r+") as f:
        for key, value in changes.items():
            f.attrs[key] = value
    return out


def test_files_the_toolkit_never_wrote_are_named(tmp_path):
    foreign = tmp_path / "foreign.nc"
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_netcdf(foreign, engine="h5netcdf")
    with pytest.raises(ResultsFileError) as err:
        load(foreign)
    assert str(err.value) == (
        f"bad results file {str(foreign)!r}: a NetCDF4/HDF5 file with variable 'a' (dims {{'x': 3}}) but without "
        "the attrs toolkit.save writes (toolkit_format_version, toolkit_version): the toolkit did not write it; "
        "open other NetCDF files with xarray.open_dataset(path)")
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["w"] = np.ones((3, 4))
    with pytest.raises(ResultsFileError, match="HDF5 file with variable 'w' .*the toolkit did not write it"):
        load(plain)
    nc3 = tmp_path / "classic.nc"
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_netcdf(nc3, engine="scipy", format="NETCDF3_CLASSIC")
    with pytest.raises(ResultsFileError) as err:
        load(nc3)
    msg = str(err.value)
    assert "not a readable NetCDF" not in msg
    assert ("not a NetCDF4 file: it is a NetCDF3 file (classic format), which toolkit.save never writes (it writes "
            "NetCDF4/HDF5); xarray.open_dataset(path) reads it") in msg


def test_other_kinds_of_file_are_named(tmp_path, smollm2_path):
    with pytest.raises(ResultsFileError, match="not a NetCDF4 file: it is a GGUF model file; compute its statistics "
                                               r"with toolkit.weight_stats\(path\)"):
        load(smollm2_path)
    ck = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=1)
    with pytest.raises(ResultsFileError, match="it is a safetensors weight file"):
        load(ck / "model.safetensors")
    with pytest.raises(ResultsFileError, match="it is a JSON file starting with"):
        load(ck / "config.json")
    (tmp_path / "empty.nc").write_bytes(b"")
    with pytest.raises(ResultsFileError, match=r"the file is empty \(0 bytes\)"):
        load(tmp_path / "empty.nc")
    (tmp_path / "noise.nc").write_bytes(bytes(range(200, 256)) * 3)
    with pytest.raises(ResultsFileError, match="it starts with the bytes c8 c9 ca cb cc cd ce cf, not the signature"):
        load(tmp_path / "noise.nc")


def test_the_lab_netcdf_of_the_toolkit_still_loads():
    ds = load(ROOT / "data" / "attention_lab.nc")  # written by the lab's writer: toolkit_version, no format version
    assert "attention_norm" in ds


@pytest.mark.parametrize("version, expected", [
    (1.9, r"in on-disk format 1\.9; this toolkit .* reads format 1 and older: upgrade the toolkit"),
    (2, "in on-disk format 2;"),
    ("abc", r"its toolkit_format_version attr is 'abc' \(str\), not a number"),
    ("1", r"its toolkit_format_version attr is '1' \(str\), not a number"),
    (np.array([1, 2]), r"toolkit_format_version attr is '\[1 2\]' \(ndarray\), not a number"),
    (float("nan"), "toolkit_format_version attr is 'nan'"),
    (0.5, "its toolkit_format_version is 0.5, which no toolkit wrote"),
    (0, "its toolkit_format_version is 0, which no toolkit wrote"),
])
def test_format_versions_are_read_as_numbers_never_truncated(tmp_path, version, expected):
    bad = _rewrite_attrs(_saved(tmp_path), tmp_path / "v.nc", toolkit_format_version=version)
    with pytest.raises(ResultsFileError, match=expected):
        load(bad)


def test_a_saved_file_with_format_1_as_a_numpy_int_loads(tmp_path):
    ok = _rewrite_attrs(_saved(tmp_path), tmp_path / "v.nc", toolkit_format_version=np.int8(1))
    assert load(ok).attrs["config"] == {"a": 1}


def test_corrupted_json_attrs_name_the_attr(tmp_path):
    p = _saved(tmp_path)
    bad = _rewrite_attrs(p, tmp_path / "b.nc", config='{"a": 1')
    with pytest.raises(ResultsFileError, match=r"its attr 'config' \('\{\"a\": 1'\) is not valid JSON .*: the attrs "
                                               r"were edited or damaged; xarray.open_dataset\(path\) opens"):
        load(bad)
    bad = _rewrite_attrs(p, tmp_path / "c.nc", toolkit_json_attrs="config")
    with pytest.raises(ResultsFileError, match="its toolkit_json_attrs attr \\('config'\\) is not a JSON list"):
        load(bad)
    bad = _rewrite_attrs(p, tmp_path / "d.nc", config="[" * 100_000)
    with pytest.raises(ResultsFileError, match="its attr 'config'"):  # RecursionError inside json
        load(bad)
    bad = _rewrite_attrs(p, tmp_path / "e.nc", config=7)
    with pytest.raises(ResultsFileError, match="its attr 'config' is a int64 .*not the JSON text"):
        load(bad)
    var = tmp_path / "f.nc"
    var.write_bytes(p.read_bytes())
    with h5py.File(var, "r+") as f:
        f["stable_rank"].attrs["toolkit_json_attrs"] = '["units"]'
        f["stable_rank"].attrs["units"] = "m/s"
    with pytest.raises(ResultsFileError, match=r"its attr 'units' \('m/s'\) is not valid JSON .*\(variable "
                                               r"'stable_rank'\): the attrs were edited"):
        load(var)


def test_a_truncated_file_is_a_typed_error(tmp_path):
    p = _saved(tmp_path)
    data = p.read_bytes()
    (tmp_path / "t.nc").write_bytes(data[: len(data) // 2])
    with pytest.raises(ResultsFileError, match="bad results file"):
        load(tmp_path / "t.nc")


_BOMB = """
import resource, sys, h5py
from toolkit.errors import ResultsFileError
from toolkit.io import load
path = sys.argv[1]
with h5py.File(path, "w") as f:  # 2 GiB declared, nothing allocated
    f.create_dataset("stable_rank", shape=(2**28,), dtype="f8")
    f.attrs["toolkit_format_version"] = 1
    f.attrs["toolkit_version"] = "0.1.0"
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load(path)
    print("LOADED")
except ResultsFileError as e:
    print("ERROR", e)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print("GROWN_KB", grown)
"""


def test_a_tiny_file_declaring_2_gib_is_refused_without_reading(tmp_path):
    path = tmp_path / "bomb.nc"
    out = subprocess.run([sys.executable, "-c", _BOMB, str(path)], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert path.stat().st_size < 16 * 1024
    assert "ERROR bad results file" in out.stdout, out.stdout
    assert "variable 'stable_rank' declares 2.0 GiB ((268435456,) x float64) but the file stores 0 bytes" in out.stdout
    assert "it is truncated, or was not written by toolkit.save" in out.stdout
    grown_kb = int(out.stdout.split("GROWN_KB")[1])
    assert grown_kb < 64 * 1024, f"load grew the process by {grown_kb} KB"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe forks (Linux)")
def test_a_file_that_hangs_or_crashes_the_hdf5_library_is_a_typed_error(tmp_path, monkeypatch):
    import toolkit.io.hostile as io

    p = _saved(tmp_path)
    monkeypatch.setattr(io, "PROBE_TIMEOUT_S", 2.0)
    monkeypatch.setattr(io, "_PROBE", "import time; time.sleep(30)")  # what a looping HDF5 does, in the probe
    with pytest.raises(ResultsFileError, match=r"reading it did not finish in 2 s \(the HDF5 library loops on it\); "
                                               "the file is damaged .*so it is not read in this process"):
        load(p)  # the message is the timeout's: the probe was stopped at 2 s, not waited for
    monkeypatch.setattr(io, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(ResultsFileError, match=r"reading it crashes the HDF5 library \(signal SIGSEGV\)"):
        load(p)
    monkeypatch.undo()
    assert load(p).attrs["config"] == {"a": 1}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe forks (Linux)")
def test_an_unchanged_file_is_probed_once_and_a_rewritten_one_again(tmp_path, monkeypatch):
    """A watched run's view reads its store at every refresh: a record the probe read whole is not probed again
    while unchanged, and any write (the same bytes too) makes the next load probe it."""
    import toolkit.io.hostile as io

    p = _saved(tmp_path)
    assert load(p).attrs["config"] == {"a": 1}  # probed, read whole
    monkeypatch.setattr(io, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert load(p).attrs["config"] == {"a": 1}  # unchanged: the crashing probe did not run
    p.write_bytes(p.read_bytes())
    with pytest.raises(ResultsFileError, match=r"reading it crashes the HDF5 library \(signal SIGSEGV\)"):
        load(p)


def _heap_objects(data: bytes):
    """Offsets of the size fields of the objects of the file's first HDF5 global heap collection."""
    import struct

    start = data.find(b"GCOL")
    end, j = start + int.from_bytes(data[start + 8:start + 16], "little"), start + 16
    while j + 16 <= end:
        index, _, _, size = struct.unpack("<HHIQ", data[j:j + 16])
        if index == 0:
            break
        yield j + 8, size
        j += 16 + (size + 7) // 8 * 8


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe forks (Linux)")
def test_damaged_global_heaps_never_hang_load(tmp_path, monkeypatch):
    """A size changed in the global heap (which holds the dimension lists) makes HDF5 1.14 loop forever."""
    import toolkit.io.hostile as io

    monkeypatch.setattr(io, "PROBE_TIMEOUT_S", 3.0)
    data = _saved(tmp_path).read_bytes()
    fields = [offset for offset, size in _heap_objects(data) if size == 8]
    assert fields, "no global heap in the saved file"
    for offset in fields:
        bad = bytearray(data)
        bad[offset] = 178
        (tmp_path / "bad.nc").write_bytes(bad)
        try:  # a hang is stopped by the probe's timeout (3 s here) and reported as ResultsFileError
            load(tmp_path / "bad.nc")
        except ResultsFileError:
            pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe forks (Linux)")
def test_mutated_saved_files_give_a_typed_error_or_a_dataset(tmp_path_factory):
    """Bytes of a saved file changed at random: ``load`` answers ResultsFileError or a Dataset (NetCDF4
    has no checksum of the values, so a changed value can go unnoticed), in bounded time and memory, never
    another exception (1,500 such mutations were tried by hand)."""
    import resource

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    import toolkit.io.hostile as io

    folder = tmp_path_factory.mktemp("mutated")
    data = _saved(folder).read_bytes()
    io.PROBE_TIMEOUT_S, before = 3.0, io.PROBE_TIMEOUT_S
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)), min_size=1, max_size=8))
    def check(changes):
        bad = bytearray(data)
        for i, b in changes:
            bad[i] = b
        (folder / "m.nc").write_bytes(bad)
        try:
            ds = load(folder / "m.nc")
        except ResultsFileError:
            pass
        else:
            assert isinstance(ds, xr.Dataset) and len(ds.data_vars) == 1  # a changed value or name at most

    try:
        check()
    finally:
        io.PROBE_TIMEOUT_S = before
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 200 * 1024  # KB


def test_compressed_files_written_with_an_encoding_still_load(tmp_path):
    ds = xr.Dataset({"x": ("i", np.zeros(200_000))}, attrs={"toolkit_version": "0.1"})  # compresses ~1000:1
    ds.to_netcdf(tmp_path / "z.nc", engine="h5netcdf", encoding={"x": {"zlib": True, "complevel": 9}})
    assert float(load(tmp_path / "z.nc").x.sum()) == 0.0


def test_save_and_load_refuse_what_netcdf_cannot_hold(tmp_path):
    def with_attrs(**attrs):
        ds = _ds()
        ds.attrs.update(attrs)
        return ds

    back = load(save(with_attrs(shape=[np.int64(3), np.float32(0.5)], arr={"a": np.arange(2)}), tmp_path / "ok.nc"))
    assert back.attrs["shape"] == [3, 0.5] and back.attrs["arr"] == {"a": [0, 1]}  # NumPy values, made plain
    cases = [
        (with_attrs(s={1, 2}), "attr 's' of the Dataset is of type set ('{1, 2}'), which NetCDF cannot store"),
        (with_attrs(d={1: 2}), "attr 'd' of the Dataset is a dict with the key 1, not a str: attrs that are dicts are "
                               "stored as JSON, which keeps only str keys (it would come back as '1'); use str keys"),
        (with_attrs(o=[object()]), "attr 'o' of the Dataset is of type object"),
        (xr.Dataset({"a": ("x", [1.0], {"u": {3}})}), "attr 'u' of variable 'a' is of type set"),
        (xr.Dataset({"a": ("x", np.array([object(), 1], dtype=object))}), "cannot write this Dataset as NetCDF4"),
    ]
    for ds, expected in cases:
        with pytest.raises(UnsavableDatasetError) as err:
            save(ds, tmp_path / "bad.nc")
        assert expected in str(err.value) and isinstance(err.value, TypeError)
    for bad in (42, None, b"x.nc", ""):  # one contract: InvalidOptionError naming the function and path
        with pytest.raises(InvalidOptionError, match="toolkit.save: path=.* must be a path"):
            save(_ds(), bad)
        with pytest.raises(InvalidOptionError, match="toolkit.load: path=.* must be a path"):
            load(bad)
    with pytest.raises(InvalidOptionError, match=r"os\.fsdecode"):
        save(_ds(), b"x.nc")
    with pytest.raises(OutputPathError, match="holds a NUL character"):
        save(_ds(), str(tmp_path / "a\x00b.nc"))
    with pytest.raises(ResultsNotFoundError, match="holds a NUL character"):
        load(str(tmp_path / "a\x00b.nc"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.nc"]  # nothing half-written


# ---------------------------------------------------------- stale temporaries --

_KILLED_SAVE = """
import sys, time
import xarray as xr
import toolkit

def slow(self, path, *a, **k):  # the first bytes of the file, then a writer that never finishes
    with open(path, "wb") as f:
        f.write(b"\\x89HDF\\r\\n\\x1a\\n" + bytes(100_000))
    print("WRITING", flush=True)
    time.sleep(600)

xr.Dataset.to_netcdf = slow
toolkit.save(xr.Dataset({"a": ("x", [1.0])}), sys.argv[1])
"""


def test_temporaries_of_a_killed_save_are_removed_by_a_later_save(tmp_path):
    target = tmp_path / "stats.nc"
    child = subprocess.Popen([sys.executable, "-c", _KILLED_SAVE, str(target)], stdout=subprocess.PIPE, text=True,
                             cwd=ROOT)
    try:
        assert child.stdout.readline().strip() == "WRITING"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    left = [p for p in tmp_path.iterdir() if p.name != "cache"]
    assert len(left) == 1 and left[0].name.startswith(".stats.nc.") and left[0].name.endswith(".tmp")
    assert left[0].stat().st_size > 100_000 and not target.exists()

    save(_ds(), tmp_path / "other.nc")  # a fresh leftover may belong to a live writer: kept
    assert left[0].exists()
    old = time.time() - STALE_AFTER_S - 60
    os.utime(left[0], (old, old))  # an hour later, nobody wrote to it
    fresh = tmp_path / ".other.nc.0123abcd.tmp"
    fresh.write_bytes(b"a live writer's")
    foreign = tmp_path / ".notes.tmp"  # not our naming
    foreign.write_text("x")
    os.utime(foreign, (old, old))
    import toolkit.atomic as atomic

    atomic._swept.clear()  # the sweep of a folder runs at most every 10 minutes per process
    save(_ds(), tmp_path / "third.nc")
    assert not left[0].exists()
    assert fresh.exists() and foreign.exists()
    assert load(tmp_path / "third.nc").stable_rank.shape == (3, 2)


def test_stale_temporary_folders(tmp_path):
    old = time.time() - STALE_AFTER_S - 60
    (tmp_path / "step-00010").mkdir()
    stale = tmp_path / ".step-00010.89abcdef.tmp"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "model.safetensors").write_bytes(b"x" * 10)
    orphan = tmp_path / ".step-00020.89abcdef.tmp"  # its final name is missing: may be the only copy
    orphan.mkdir()
    busy = tmp_path / ".step-00010.fedcba98.tmp"  # an old folder with a file written just now
    busy.mkdir()
    (busy / "model.safetensors").write_bytes(b"y")
    for p in (stale / "sub" / "model.safetensors", stale / "sub", stale, orphan, busy):
        os.utime(p, (old, old))
    link = tmp_path / ".link.00000000.tmp"
    link.symlink_to(tmp_path / "step-00010")
    os.utime(link, (old, old), follow_symlinks=False)
    assert remove_stale_temps(tmp_path) == [stale]
    assert orphan.exists() and busy.exists() and link.is_symlink() and (tmp_path / "step-00010").is_dir()
    import toolkit.atomic as atomic

    atomic._swept.clear()
    os.utime(busy / "model.safetensors", (old, old))
    with atomic_dir(tmp_path / "step-00030") as tmp:  # any atomic write into the folder sweeps it
        (tmp / "f").write_text("new")
    assert not busy.exists() and orphan.exists() and (tmp_path / "step-00030" / "f").read_text() == "new"


# --------------------------------------------------------------- command line --

def _nonsense_42(tmp_path) -> Path:
    """A checkpoint whose config says 42 layers and whose weights are random bytes."""
    folder = tmp_path / "nonsense"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 42,
                                                    "hidden_size": 64, "num_attention_heads": 4}))
    (folder / "model.safetensors").write_bytes(np.random.default_rng(0).bytes(4096))
    return folder


def test_the_command_lines_answer_bad_input_with_one_line_and_status_2(tmp_path):
    """In real processes: no traceback, one line on stderr, exit status 2."""
    cases = [
        (["toolkit", "weights", str(tmp_path / "missing"), "-q"], "cannot open checkpoint"),
        (["toolkit", "weights", str(_nonsense_42(tmp_path)), "-q"], "nonsense"),
        (["toolkit", "weights", str(tmp_path / "missing"), "--metrics", "stabel_rank", "-q"],
         "Did you mean 'stable_rank'?"),
        (["toolkit", "compare", "a", "b", "--k", "0"], "argument --k: '0' is not valid: a whole number >= 1"),
        (["toolkit.lab", "--epochs", "-1"], "python -m toolkit.lab: argument --epochs: '-1' is not valid"),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLKIT_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.Popen([sys.executable, "-m", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT, env=env) for argv, _ in cases]
    for (argv, expected), run in zip(cases, runs, strict=True):
        _, err = run.communicate(timeout=300)
        lines = [line for line in err.splitlines() if "Warning" not in line and line.strip()]
        assert run.returncode == 2, (argv, err)
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, err)
        assert "Traceback" not in err and expected in lines[0], (argv, err)


def _status(main, argv, capsys) -> tuple[int, str]:
    """``main(argv)``'s exit status (argparse errors included) and stderr."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def test_every_subcommand_checks_its_options_before_any_work(tmp_path, capsys, monkeypatch):
    from toolkit.cli import main
    from toolkit.finetune.cli import main as finetune_main
    from toolkit.lab.cli import main as lab_main

    for name in ("weight_stats", "compare", "compare_series"):
        monkeypatch.setattr(toolkit, name, lambda *a, _n=name, **k: pytest.fail(f"{_n} ran before the check"))
    monkeypatch.setattr("toolkit.lab.train.run_experiment", lambda *a, **k: pytest.fail("the lab ran"))
    monkeypatch.setattr("toolkit.finetune.cli.finetune", lambda *a, **k: pytest.fail("finetune ran"))
    png = str(tmp_path / "x.png")
    (tmp_path / "afile").write_text("x")
    cases = [
        (main, ["compare", "a", "b", "--tolerance", "-1"], "argument --tolerance: '-1' is not valid: a finite number"),
        (main, ["compare", "a", "b", "--k", "2.5"], "argument --k: '2.5' is not a whole number"),
        (main, ["series", "a", "b", "--steps", "0", "x"], "argument --steps: 'x' is not a whole number"),
        (main, ["series", "a", "b", "--tolerance", "nan"], "argument --tolerance: 'nan' is not valid"),
        (main, ["finetune", str(tmp_path / "ft"), "--lr", "nan"],
         "argument --lr: 'nan' is not valid: a finite number > 0"),
        (main, ["finetune", str(tmp_path / "ft"), "--steps", "0"], "argument --steps: '0' is not valid"),
        (main, ["finetune", str(tmp_path / "ft"), "--seed", "-1"], "argument --seed: '-1' is not valid: a whole number "
         "from 0 to 18446744073709551615"),
        (main, ["finetune", str(tmp_path / "afile")], "the run folder (OUT_DIR) is a file"),
        (main, ["lab", "--threads", "0"], "argument --threads: '0' is not valid"),
        (main, ["lab", "--activations", ",", "--out", str(tmp_path / "l.nc")], "at least one activation"),
        (main, ["lab", "--activations", "x^0/1", "--out", str(tmp_path / "l.nc")],
         "cannot read attention activation 'x^0/1'"),
        (main, ["lab", "--preset", "fast", "--out", str(tmp_path / "l.nc"), "--plot", png + "q"],
         ".pngq is not a format matplotlib writes"),
        (main, ["lab", "--preset", "fast", "--out", str(tmp_path)], "--out is a folder; give a file name inside it"),
        (main, ["nosuch"], "argument command: invalid choice: 'nosuch'"),
        (lab_main, ["--epochs", "x"], "python -m toolkit.lab: argument --epochs: 'x' is not a whole number"),
        (finetune_main, [str(tmp_path / "ft"), "--text", str(tmp_path / "none.txt")],
         "no such training text (--text)"),
        (finetune_main, [str(tmp_path / "ft"), "--batch-size", "-4"], "python -m toolkit finetune: argument "
         "--batch-size: '-4' is not valid"),
    ]
    latin = tmp_path / "latin.txt"
    latin.write_bytes("na\u00efve".encode("latin-1"))
    cases.append((finetune_main, [str(tmp_path / "ft"), "--text", str(latin)],
                  f"training text (--text) {str(latin)!r} is not UTF-8 text (bytes ef 76 65 at offset 2"))
    for main_, argv, expected in cases:
        code, err = _status(main_, argv, capsys)
        assert code == 2, (argv, err)
        assert err.startswith("error: ") and err.count("\n") == 1 and "usage:" not in err, (argv, err)
        assert expected in err, (argv, err)
    assert {p.name for p in tmp_path.iterdir()} <= {"afile", "cache", "latin.txt"}  # nothing written


def test_an_unexpected_error_is_one_line_with_status_1(monkeypatch, capsys, tmp_path):
    from toolkit.cli import main

    def broken(*a, **k):
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(toolkit, "weight_stats", broken)
    monkeypatch.delenv("TOOLKIT_TRACEBACK", raising=False)
    assert main(["weights", str(tmp_path), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unexpected RuntimeError: something broke (a bug of the")
    assert "TOOLKIT_TRACEBACK=1 shows the traceback" in err
    monkeypatch.setenv("TOOLKIT_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        main(["weights", str(tmp_path), "-q"])


def test_cli_numeric_checks_are_the_api_s(capsys):
    from toolkit.cli import build_parser

    args = build_parser().parse_args(["compare", "a", "b", "--k", "3", "--tolerance", "1e-3"])
    assert args.k == 3 and type(args.k) is int and args.tolerance == 1e-3
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["compare", "a", "b", "--tolerance", "inf"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err
    assert err.startswith("error: python -m toolkit compare: argument --tolerance: 'inf' is not valid: a finite "
                          "number >= 0")
    assert math.isclose(build_parser().parse_args(["finetune", "d", "--lr", "2e-5"]).lr, 2e-5)



def test_finetune_and_the_lab_check_their_numbers_before_any_work(tmp_path):
    from toolkit.errors import InvalidOptionError, TextInputError
    from toolkit.finetune import finetune
    from toolkit.lab.train import run_experiment

    for kwargs in [dict(steps=0), dict(steps=2.5), dict(lr=-1.0), dict(seq_len=1), dict(seed=-1),
                   dict(batch_size=True)]:
        with pytest.raises(InvalidOptionError):
            finetune(tmp_path / "run", **kwargs)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(TextInputError, match="not UTF-8"):
        finetune(tmp_path / "run", text=latin1)
    for kwargs in [dict(epochs=-1), dict(epochs=2.5), dict(threads=0), dict(seed="1"), dict(preset="huge")]:
        with pytest.raises(InvalidOptionError):
            run_experiment(["softmax"], out=tmp_path / "lab.nc", **kwargs)
    assert not (tmp_path / "run").exists() and not (tmp_path / "lab.nc").exists()
