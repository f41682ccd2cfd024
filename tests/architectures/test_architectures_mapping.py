"""A user Mapping on a made-up naming scheme, and the declarative Split."""

from __future__ import annotations

import pickle

import torch

from toolkit.architectures import COMPONENTS, Dims, Mapping, Split, resolve_adapter


def made_up_checkpoint(num_layers=3, heads=4, kv_heads=2, head_dim=8, hidden=32, ffn=48):
    """Names like a home-grown model: fused qkv (in, out), separate w1/w2/w3."""
    g = torch.Generator().manual_seed(0)
    q, kv = heads * head_dim, kv_heads * head_dim
    tensors = {"tok_emb.weight": torch.randn(100, hidden, generator=g)}
    for i in range(num_layers):
        tensors[f"trunk.block{i}.mix.wqkv"] = torch.randn(hidden, q + 2 * kv, generator=g)  # (in, out)
        tensors[f"trunk.block{i}.mix.proj"] = torch.randn(hidden, q, generator=g)
        tensors[f"trunk.block{i}.ff.w1"] = torch.randn(ffn, hidden, generator=g)
        tensors[f"trunk.block{i}.ff.w3"] = torch.randn(ffn, hidden, generator=g)
        tensors[f"trunk.block{i}.ff.w2"] = torch.randn(hidden, ffn, generator=g)
        tensors[f"trunk.block{i}.norm"] = torch.randn(hidden, generator=g)
    config = {"model_type": "homegrown", "n_layers": num_layers, "dim": hidden, "n_heads": heads,
              "n_kv_heads": kv_heads}
    return config, tensors


MAPPING = Mapping(
    {
        "attn.o": r"trunk\.block(\d+)\.mix\.proj",
        "mlp.gate": r"trunk\.block(\d+)\.ff\.w1",
        "mlp.up": r"trunk\.block(?P<layer>\d+)\.ff\.w3",
        "mlp.down": r"trunk\.block(\d+)\.ff\.w2",
    },
    fused={r"trunk\.block(\d+)\.mix\.wqkv": Split(("attn.q", "attn.k", "attn.v"), (32, 16, 16))},
    transpose=[r"trunk\.block(\d+)\.mix\.wqkv", "attn.o"],
    name="homegrown",
)


def test_user_mapping_on_made_up_names():
    config, tensors = made_up_checkpoint()
    adapter = resolve_adapter(config, list(tensors), mapping=MAPPING)
    assert adapter.family == "homegrown" and adapter.num_layers == 3
    assert adapter.components == COMPONENTS
    cells = {(p.layer, p.component): (p, tensors[n]) for n in tensors for p in adapter.pieces(n)}
    assert set(cells) == {(i, c) for i in range(3) for c in COMPONENTS}
    adapter.check_layers(i for i, _ in cells)
    p, t = cells[2, "attn.k"]
    torch.testing.assert_close(p.extract(t), t.T[32:48])
    assert p.module_name == "trunk.block2.mix.wqkv" and p.out_index == slice(32, 48)
    p, t = cells[1, "attn.o"]
    torch.testing.assert_close(p.extract(t), t.T)
    p, t = cells[0, "mlp.up"]
    assert p.extract(t) is t  # nothing to cut: no copy
    assert adapter.pieces("trunk.block0.norm") == [] and adapter.pieces("tok_emb.weight") == []


def test_mapping_sizes_from_config_and_dict_shorthand():
    config = {"model_type": "x", "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4}
    m = Mapping(
        {"attn.o": r"l(\d+)\.o"},
        fused={r"l(\d+)\.qkv": Split(("attn.q", "attn.k", "attn.v"), lambda d: (d.head_dim,) * 3,
                                     groups=lambda d: d.num_attention_heads)},
    )
    adapter = resolve_adapter(config, [], mapping=m)
    q = adapter.pieces("l1.qkv")[0]
    assert q.out_index.tolist() == [r for h in range(4) for r in range(24 * h, 24 * h + 8)]
    w = torch.arange(96.0).unsqueeze(1).expand(96, 32)
    assert q.extract(w)[:, 0].tolist() == q.out_index.float().tolist()
    # a plain dict is accepted as a mapping; layer count then comes from the config
    plain = resolve_adapter(config, ["l0.o", "l1.o"], mapping={"attn.o": r"l(\d+)\.o"})
    assert plain.components == ("attn.o",) and plain.num_layers == 2


def test_layer_count_from_names_when_config_has_none():
    adapter = resolve_adapter({}, ["l0.o", "l1.o", "l4.o"], mapping={"attn.o": r"l(\d+)\.o"})
    assert adapter.num_layers == 5
    adapter.check_layers([0, 1, 2, 3, 4])


def test_dims_aliases():
    gpt2 = Dims.from_config({"n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": None})
    assert (gpt2.num_layers, gpt2.head_dim, gpt2.intermediate_size, gpt2.kv_rows) == (12, 64, 3072, 768)
    gemma3 = Dims.from_config({"model_type": "gemma3", "text_config": {
        "num_hidden_layers": 26, "hidden_size": 1152, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 256}})
    assert (gemma3.num_layers, gemma3.q_rows, gemma3.kv_rows) == (26, 1024, 256)


def test_pieces_pickle():
    """Pieces travel to Dask workers: their extract must pickle."""
    adapter = resolve_adapter({"model_type": "gpt_neox", "num_hidden_layers": 1, "hidden_size": 32,
                               "num_attention_heads": 4}, [])
    pieces = adapter.pieces("gpt_neox.layers.0.attention.query_key_value.weight")
    again = pickle.loads(pickle.dumps(pieces))
    w = torch.randn(96, 32)
    for a, b in zip(pieces, again, strict=True):
        assert a == b and torch.equal(a.extract(w), b.extract(w))
