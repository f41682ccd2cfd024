"""The lab's presets (more tokens, wider heads), upsampled digits and the score-scale statistics."""

import math

import numpy as np
import pytest
import torch

from toolkit.errors import EmptyInputError, InvalidOptionError
from toolkit.lab import PRESETS, ViT, main, run_experiment
from toolkit.lab.attention import SCORE_STATISTICS, score_statistics
from toolkit.lab.data import load_digits_split, upsample
from toolkit.lab.dataset import VARIABLE_ATTRS, read_netcdf
from toolkit.lab.train import PRESET_NOTES

#: Each preset's token count, from its images and patches: (image / patch)² + 1.
TOKENS = {"full": 17, "fast": 17, "up16": 65, "patch1": 65, "up16-wide": 65, "up32": 257}
#: Fast settings for a preset's test: its images, patches, width and heads; 2 layers, 48 images.
TINY = dict(depth=2, train_subset=48, batch_size=16, eval_batch=6)


def test_score_statistics_by_hand():
    assert score_statistics(torch.tensor([[0.5, -2.0], [1.0, 0.0]])) == (0.875, pytest.approx(1.97, abs=1e-15), 0.25)
    # |S| = 1 exactly is not above 1; p99 of 1..100 is 99.01 (position 0.99 * 99 = 98.01)
    s = torch.arange(1, 101, dtype=torch.float32).reshape(4, 25) * torch.tensor([1.0, -1.0]).repeat(50).reshape(4, 25)
    mean, p99, above = score_statistics(s)
    assert mean == 50.5 and p99 == pytest.approx(99.01, abs=1e-9) and above == 0.99
    assert score_statistics(torch.tensor([3.0])) == (3.0, 3.0, 1.0)
    with pytest.raises(EmptyInputError):
        score_statistics(torch.zeros(0, 4))


def test_score_statistics_equal_numpy_on_a_large_random_layer():
    gen = torch.Generator().manual_seed(1)
    s = torch.randn(32, 4, 65, 65, generator=gen) * 1.7
    a = np.abs(s.numpy().astype(np.float64)).ravel()
    mean, p99, above = score_statistics(s)
    assert mean == pytest.approx(a.mean(), rel=1e-12)
    assert p99 == pytest.approx(np.quantile(a, 0.99), rel=1e-12)
    assert above == np.count_nonzero(a > 1) / a.size


def test_vit_scores_equal_a_hand_computation_of_the_first_layer():
    torch.manual_seed(0)
    model = ViT("x³/16", image_size=16, patch_size=2, dim=16, depth=2, heads=2).eval()
    images = torch.rand(3, 1, 16, 16)
    norms, stats = model.attention_statistics(images)
    assert norms.shape == (2, 2, 3) and len(stats) == 2 and model.num_tokens == 65
    with torch.no_grad():  # layer 0 from its weights: patches, class token, positions, LayerNorm, q kᵀ/√8
        x = torch.nn.functional.conv2d(images, model.patch_embed.weight, model.patch_embed.bias, stride=2)
        x = torch.cat([model.cls_token.expand(3, 1, 16), x.flatten(2).transpose(1, 2)], 1) + model.pos_embed
        blk = model.blocks[0]
        h = torch.nn.functional.layer_norm(x, (16,), blk.norm1.weight, blk.norm1.bias)
        qkv = h @ blk.attn.qkv.weight.T + blk.attn.qkv.bias
        q, k = qkv[..., :16].reshape(3, 65, 2, 8), qkv[..., 16:32].reshape(3, 65, 2, 8)
        s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(8)
    a = np.abs(s.double().numpy()).ravel()
    np.testing.assert_allclose(stats[0], (a.mean(), np.quantile(a, 0.99), (a > 1).mean()), rtol=1e-5)
    np.testing.assert_allclose(norms[0].T.numpy(), np.sqrt(((s.double() ** 3 / 16) ** 2).sum((-2, -1))), rtol=1e-5)


def test_upsampled_digits_by_hand():
    img = torch.tensor([[[[0.0, 4.0], [0.0, 4.0]]]])
    out = upsample(img, 4)  # bilinear, pixel centres: 0, ¼ of the way, ¾ of the way, 4
    np.testing.assert_allclose(out[0, 0].numpy(), [[0, 1, 3, 4]] * 4)
    split = load_digits_split(train_subset=5, image_size=32)
    assert split.x_train.shape == (5, 1, 32, 32) and split.x_test.shape == (360, 1, 32, 32)
    plain = load_digits_split(train_subset=5)
    np.testing.assert_allclose(split.x_test.mean((-2, -1)), plain.x_test.mean((-2, -1)), atol=0.02)
    with pytest.raises(InvalidOptionError, match="multiple of 8"):
        load_digits_split(image_size=12)


@pytest.mark.parametrize("preset", [p for p in PRESETS if p != "full"])
def test_each_preset_trains_with_fast_settings(preset):
    cfg = PRESETS[preset]
    narrow = {"dim": 16 * cfg.heads} if cfg.dim > 32 else {}  # width 128 at N = 257 costs 30 s here; heads kept
    ds = run_experiment(["softmax", "x/1"], epochs=1, preset=preset, **TINY, **narrow)
    n = TOKENS[preset]
    assert ds.attrs["num_tokens"] == n and ds.attrs["head_dim"] == narrow.get("dim", cfg.dim) // cfg.heads
    assert (ds.attrs["image_size"], ds.attrs["patch_size"]) == (cfg.image_size, cfg.patch_size)
    assert dict(ds.sizes) == {"activation": 2, "epoch": 2, "layer": 2, "head": cfg.heads}
    assert float(ds["attention_norm_max"].sel(activation="softmax").max()) <= math.sqrt(n) + 1e-9
    for name in SCORE_STATISTICS:
        assert ds[name].dims == ("activation", "epoch", "layer") and np.isfinite(ds[name]).all()
        assert ds[name].attrs == VARIABLE_ATTRS[name]
    # x/1 is A = S: mean |S| <= rms |S| = ‖S‖_F / N for every matrix, so on average too
    x1 = ds.sel(activation="x/1")
    assert (x1["score_mean_abs"] <= x1["attention_norm"] / n * (1 + 1e-9)).all()
    assert ((ds["score_fraction_above_1"] >= 0) & (ds["score_fraction_above_1"] <= 1)).all()
    assert (ds["score_p99_abs"] >= 0).all()


def test_presets_have_notes_and_the_paper_head_width():
    assert set(PRESET_NOTES) == set(PRESETS) and PRESETS["fast"].epochs == 3
    assert {p: c.num_tokens for p, c in PRESETS.items()} == TOKENS
    assert PRESETS["up16-wide"].dim // PRESETS["up16-wide"].heads == 64 == PRESETS["up32"].dim // PRESETS["up32"].heads
    with pytest.raises(InvalidOptionError, match="patch_size"):
        run_experiment(["softmax"], epochs=0, preset="fast", patch_size=3)
    with pytest.raises(InvalidOptionError, match="heads"):
        run_experiment(["softmax"], epochs=0, preset="fast", heads=3)


def test_cli_help_lists_every_preset(capsys):
    from toolkit.cli import main as toolkit_main

    for entry in (lambda: main(["--help"]), lambda: toolkit_main(["lab", "--help"])):
        with pytest.raises(SystemExit) as done:
            entry()
        assert done.value.code == 0
        text = capsys.readouterr().out
        for name, cfg in PRESETS.items():
            assert f"  {name:<10} N = {cfg.num_tokens:<3} {cfg.image_size}x{cfg.image_size} images" in text
        assert "N = 257" in text and "2 heads of 64" in text


def test_no_checkpoints_leaves_only_the_netcdf(tmp_path):
    out = tmp_path / "run.nc"
    ds = run_experiment(["x/16"], epochs=1, out=out, preset="fast", checkpoints=False, **TINY)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.nc"]
    assert read_netcdf(out)["completed_epochs"].values.tolist() == [1] == ds["completed_epochs"].values.tolist()


def test_history_older_than_the_score_statistics_lines_up():
    from toolkit.lab.dataset import build_dataset, complete_history, histories_from_dataset, new_history

    hist = new_history()
    for e in range(3):
        for k in ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "skipped_steps", "epoch_time"):
            hist[k].append(float(e))
        hist["attention_norm_head"].append(np.ones((2, 1)))
        hist["attention_norm_max"].append(np.ones((2, 1)))
    old = {k: v for k, v in hist.items() if not k.startswith("score_")}
    complete_history(old, 2)
    old["score_mean_abs"].append(np.array([5.0, 6.0]))  # epoch 3, recorded by a newer toolkit
    for k in ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "skipped_steps", "epoch_time"):
        old[k].append(3.0)
    old["attention_norm_head"].append(np.ones((2, 1)))
    old["attention_norm_max"].append(np.ones((2, 1)))
    ds = build_dataset({"x/1": old}, epochs=3, depth=2, heads=1, attrs={})
    assert np.isnan(ds["score_mean_abs"].values[0, :3]).all()
    np.testing.assert_array_equal(ds["score_mean_abs"].values[0, 3], [5.0, 6.0])  # at epoch 3, not epoch 0
    back = histories_from_dataset(ds.drop_vars(["score_p99_abs"]))["x/1"]
    assert len(back["score_p99_abs"]) == 4 and np.isnan(back["score_p99_abs"][3]).all()
