"""The format registry (toolkit.sources.formats): a format defined and registered here, in the test, opens
through toolkit.open_source and is measured by toolkit.weight_stats, with no change to sources/local.py."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import shutil

import numpy as np
import pytest
import torch

import toolkit
from toolkit.config_keys import normalize_config
from toolkit.errors import DuplicateRegistrationError, ToolkitError, UnknownFormatError
from toolkit.sources import Source, TensorRecord, formats, open_source
from toolkit.sources.formats import (
    CheckpointFormat,
    decoder_versions,
    get_format,
    guess_format,
    list_formats,
    register_format,
    unregister_format,
)
from toolkit.sources.identity import files_identity
from toolkit.testing import write_tiny_checkpoint


class NpzSource(Source):
    """Every array of one ``.npz`` file, named by its key, with the folder's ``config.json``."""

    format = "npz"

    def __init__(self, path, location=None):
        self._path = str(path)
        self.location = location or self._path
        config = path.parent / "config.json"
        self.config = normalize_config(json.loads(config.read_text())) if config.is_file() else {}
        self.fingerprint = files_identity([path])
        self.revision = ""
        with np.load(path) as z:
            self._shapes = {k: (tuple(z[k].shape), str(z[k].dtype)) for k in z.files}

    def _read(self, name):
        with np.load(self._path) as z:
            return torch.from_numpy(z[name].copy())

    def tensors(self):
        for name, (shape, dtype) in self._shapes.items():
            yield TensorRecord(name, shape, dtype, functools.partial(self._read, name), file=self._path)

    def files(self):
        return [self._path]


class NpzFormat(CheckpointFormat):
    """A toy format: ``model.npz`` (one array per parameter) beside ``config.json``."""

    name = "npz"
    description = "model.npz: one NumPy array per parameter"
    decoders = ("numpy",)

    def guess_can_open(self, path, **options):
        return (path / "model.npz").is_file() if path.is_dir() else path.suffix == ".npz"

    def open(self, path, *, location=None, revision="", **options):
        return NpzSource(path / "model.npz" if path.is_dir() else path, location=location)


@pytest.fixture
def npz_format():
    fmt = register_format(NpzFormat)  # the one registration line
    yield fmt
    unregister_format("npz")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A tiny llama saved by transformers (safetensors) and the same weights as a toy ``model.npz``."""
    root = tmp_path_factory.mktemp("formats")
    st = write_tiny_checkpoint(root / "safetensors", "llama", num_layers=2)
    npz = root / "npz"
    npz.mkdir()
    shutil.copy(st / "config.json", npz / "config.json")
    state = {r.name: r.read().numpy() for r in open_source(st).tensors()}
    np.savez(npz / "model.npz", **state)
    return st, npz, state


def test_a_registered_format_opens_through_open_source(npz_format, checkpoints):
    st, npz, state = checkpoints
    src = toolkit.open_source(npz)
    assert isinstance(src, NpzSource) and src.format == "npz" and src.location == str(npz / "model.npz")
    records = {r.name: r for r in src.tensors()}
    assert set(records) == set(state)
    name = "model.layers.1.mlp.down_proj.weight"
    assert records[name].shape == (32, 64) and records[name].dtype == "float32"
    assert np.array_equal(records[name].read().numpy(), state[name])
    assert isinstance(toolkit.open_source(npz / "model.npz"), NpzSource)  # the file alone too
    assert get_format("npz") is npz_format and list(list_formats())[-1] == "npz"


def test_a_registered_format_is_measured_like_the_same_weights_in_safetensors(npz_format, checkpoints, cache):
    st, npz, _ = checkpoints
    want = toolkit.weight_stats(st, progress=False)
    got = toolkit.weight_stats(str(npz), progress=False)  # by path: the plan cache reopens it by the registry
    again = toolkit.weight_stats(open_source(npz), progress=False)
    assert got.attrs["format"] == again.attrs["format"] == "npz" and want.attrs["format"] == "safetensors"
    assert got.attrs["model_type"] == "llama" and got.attrs["num_hidden_layers"] == 2
    assert set(got.data_vars) == set(want.data_vars) and "stable_rank" in got.data_vars
    for var in want.data_vars:
        np.testing.assert_array_equal(got[var].values, want[var].values, err_msg=var)
        np.testing.assert_array_equal(again[var].values, want[var].values, err_msg=var)
    assert float(got.stable_rank.sel(layer=1, component="mlp.down")) > 1.0


def test_the_built_ins_are_tried_first_in_their_order(npz_format, checkpoints, tmp_path):
    st, _, _ = checkpoints
    assert list(list_formats())[:4] == ["safetensors", "pytorch", "lora", "gguf"]
    both = tmp_path / "both"
    shutil.copytree(st, both)
    np.savez(both / "model.npz", x=np.zeros(2, np.float32))
    assert guess_format(both) is get_format("safetensors")  # full weights win over a later format
    assert open_source(both).format == "safetensors"
    assert guess_format(tmp_path / "nothing.txt") is None


def test_a_keyword_a_format_declares_puts_it_first(checkpoints, tiny_gguf_dir, tmp_path):
    st, _, _ = checkpoints
    both = tmp_path / "both"
    shutil.copytree(st, both)
    shutil.copy(tiny_gguf_dir / "f16.gguf", both / "f16.gguf")
    assert open_source(both).format == "safetensors"
    assert guess_format(both, gguf_file="f16.gguf") is get_format("gguf")
    src = open_source(both, gguf_file="f16.gguf")
    assert src.format == "gguf" and src.files() == [str(both / "f16.gguf")]


def test_list_formats_is_cached_and_follows_registrations(checkpoints):
    first = list_formats()
    assert list_formats() is first
    with pytest.raises(TypeError):
        first["x"] = NpzFormat()  # read-only
    register_format(NpzFormat)
    try:
        assert "npz" not in first and list_formats() is not first and "npz" in list_formats()
        register_format(NpzFormat)  # the same class again: allowed (a reload)
    finally:
        unregister_format("npz")
    assert "npz" not in list_formats()


def test_duplicate_and_unknown_names_are_typed_errors(npz_format):
    class OtherNpz(NpzFormat):
        pass

    with pytest.raises(DuplicateRegistrationError, match=r"format 'npz' is already registered .*overwrite=True"):
        register_format(OtherNpz)
    assert type(register_format(OtherNpz, overwrite=True)) is OtherNpz
    assert list(list_formats())[-1] == "npz"  # kept its place
    with pytest.raises(UnknownFormatError, match=r"unknown checkpoint format 'nope'; registered formats: gguf, lora, "
                                                 r"npz, pytorch, safetensors") as err:
        get_format("nope")
    assert isinstance(err.value, KeyError) and err.value.known == ["gguf", "lora", "npz", "pytorch", "safetensors"]
    with pytest.raises(ToolkitError, match="needs a name"):
        register_format(type("Nameless", (CheckpointFormat,), {}))
    with pytest.raises(ToolkitError, match="takes a CheckpointFormat"):
        register_format(object())


def test_decoder_versions_of_each_format_and_of_all(npz_format, checkpoints, smollm2_path):
    version = importlib.metadata.version
    numpy = f"numpy={version('numpy')}"
    gguf = f"gguf={version('gguf')},transformers={version('transformers')}"  # what the plan cache keyed on so far
    assert get_format("gguf").decoder_versions() == gguf and get_format("safetensors").decoder_versions() == ""
    assert decoder_versions() == f"gguf:{gguf};npz:{numpy}"
    st, npz, _ = checkpoints
    assert open_source(npz).decoder_versions() == numpy  # the default asks the source's registered format
    assert open_source(st).decoder_versions() == ""
    assert open_source(smollm2_path).decoder_versions() == gguf


def test_entry_point_formats_come_after_the_registered_ones(tmp_path, monkeypatch):
    (tmp_path / "toy_format_plugin.py").write_text(
        "from toolkit.sources.formats import CheckpointFormat\n\n\n"
        "class Plugin(CheckpointFormat):\n"
        "    name = 'plugin'\n\n"
        "    def guess_can_open(self, path, **options):\n"
        "        return path.suffix == '.plugin'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [importlib.metadata.EntryPoint("plugin", "toy_format_plugin:Plugin", formats.ENTRY_POINT_GROUP),
              importlib.metadata.EntryPoint("broken", "toy_no_such_module:Format", formats.ENTRY_POINT_GROUP),
              importlib.metadata.EntryPoint("gguf", "toy_format_plugin:Plugin", formats.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None, **kw: [p for p in points if p.group == group])
    formats.refresh_formats()
    try:
        with pytest.warns(RuntimeWarning) as warned:
            listed = list_formats()
        assert list(listed) == ["safetensors", "pytorch", "lora", "gguf", "plugin"]
        assert type(listed["plugin"]).__name__ == "Plugin" and type(listed["gguf"]).__name__ == "GGUFFormat"
        messages = " | ".join(str(w.message) for w in warned)
        assert "'broken' (toy_no_such_module:Format) is left out: ModuleNotFoundError" in messages
        assert "'gguf' is left out: a format of that name is registered already" in messages
        (tmp_path / "w.plugin").write_text("")
        assert guess_format(tmp_path / "w.plugin") is listed["plugin"]
    finally:
        monkeypatch.undo()
        formats.refresh_formats()
    assert "plugin" not in list_formats()
