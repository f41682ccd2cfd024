"""Train the lab's ViT once per attention activation, recording every epoch.

After every epoch the run saves, for that activation, a checkpoint (model,
optimizer, shuffling generator, history) and rewrites the NetCDF of the whole
experiment; both writes are atomic. Started again with the same ``out``, an
interrupted run picks up each activation after its last checkpoint and
reproduces the uninterrupted run bit for bit.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
import xarray as xr

from toolkit import options
from toolkit.atomic import atomic_path
from toolkit.constraints import Check, Flag, Function, Names, OneOf, Optional, PathName, Whole, checks_options
from toolkit.errors import InvalidOptionError, LabConfigMismatchError
from toolkit.lab import dataset as lab_ds
from toolkit.lab.attention import REFERENCE, parse_activation
from toolkit.lab.data import DATASET_NAME, Split, load_digits_split
from toolkit.lab.vit import ViT

#: The five activations of the published figure.
PAPER_ACTIVATIONS = ("softmax", "x/1", "x/16", "x³/1", "x³/16")


@dataclass(frozen=True)
class LabConfig:
    """Everything that decides the numbers of a run (saved as the ``config`` attr)."""

    epochs: int = 200
    image_size: int = 8  # 8 = the digits as they are; 16 or 32 = upsampled (toolkit.lab.data.upsample)
    dim: int = 32
    depth: int = 12
    heads: int = 4
    patch_size: int = 2
    mlp_ratio: int = 2
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    eval_batch: int = 256
    train_subset: int = 0  # 0 = all 1,437 training images
    seed: int = 0

    @property
    def num_tokens(self) -> int:
        """N: ``(image_size / patch_size)²`` patches plus the class token."""
        return (self.image_size // self.patch_size) ** 2 + 1

    def model_json(self) -> str:
        """The config less ``epochs`` (a run may be extended), as JSON."""
        return json.dumps({k: v for k, v in asdict(self).items() if k != "epochs"}, sort_keys=True)


#: The runs the lab knows, by name (``python -m toolkit lab --preset NAME``). ``full``
#: (N = 17) and ``up16`` (N = 65: the same model and images, 4x the tokens) are committed
#: under ``data/``; ``fast`` is the tests' and the notebook's own short run. What each is and
#: costs: :data:`PRESET_NOTES`.
PRESETS = {
    "full": LabConfig(),
    "fast": LabConfig(epochs=3, dim=16, heads=2, batch_size=32, lr=2e-3, train_subset=512,
                      eval_batch=64),
    "up16": LabConfig(image_size=16),
    "patch1": LabConfig(patch_size=1),
    "up16-wide": LabConfig(image_size=16, dim=128, heads=2),
    "up32": LabConfig(image_size=32, dim=128, heads=2, eval_batch=64),
}

#: One line per preset for ``--help``: what it is and what it cost here (one torch thread;
#: "loaded" = two cores shared with six other jobs, load average ~10).
PRESET_NOTES = {
    "full": "the digits as they are; 0.8 s/epoch on an idle core, 1.4-3.6 loaded; "
            "committed: data/attention_lab.nc",
    "fast": "512 training images, batch 32, lr 2e-3: tests and notebook demos",
    "up16": "the same model and images as full, upsampled (bilinear): 4x the tokens; 4-6 s/epoch on an "
            "idle core, 10-20 s loaded (5 x 200 epochs: about 1.5 h of an idle core; the committed run took "
            "75 min as three processes on two cores); committed: data/attention_lab_n65.nc",
    "patch1": "as full, one pixel a token. Trains slowly: with width 16 and 512 images softmax stayed at "
              "chance for 20 epochs (x/1: 22 %), probably because LayerNorm of a one-pixel token's "
              "embedding w x + b keeps little of its intensity; up16 has N = 65 and learns",
    "up16-wide": "the paper's ViT head width (64) at N = 65",
    "up32": "the paper's head width at N = 257 (its ImageNet ViT has N = 197)",
}


@contextmanager
def _cpu_settings(threads: int | None):
    """Thread count and flush-to-zero for the run, restored afterwards.

    Cubes of small scores make subnormal floats (< 1.2e-38), which x86 CPUs
    handle in microcode, up to ~20× slower; flushing them to zero keeps the
    polynomial activations as fast as softmax.
    """
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(old)


def _checkpoint_path(ckdir: Path, label: str) -> Path:
    safe = parse_activation(label).name.replace("/", "_over_").replace("^", "_pow")
    return ckdir / f"{safe}.pt"


def _save_atomic(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


@torch.no_grad()
def _evaluate(model: ViT, split: Split, eval_images: torch.Tensor) -> dict:
    model.eval()
    logits = model(split.x_test)
    norms, stats = model.attention_statistics(eval_images)  # (layer, head, batch); per layer
    by_name = dict(zip(lab_ds.LAYER_ARRAYS, zip(*stats, strict=True), strict=True))
    return {
        **{k: list(v) for k, v in by_name.items()},
        "test_loss": F.cross_entropy(logits, split.y_test).item(),
        "test_accuracy": (logits.argmax(-1) == split.y_test).double().mean().item(),
        "attention_norm_head": norms.mean(-1).tolist(),
        "attention_norm_max": norms.amax(-1).tolist(),
    }


def _train_epoch(model, opt, split: Split, cfg: LabConfig, gen: torch.Generator) -> dict:
    model.train()
    perm = torch.randperm(len(split.y_train), generator=gen)
    losses, correct, skipped = [], 0, 0
    t0 = time.perf_counter()
    for i in range(0, len(perm), cfg.batch_size):
        idx = perm[i:i + cfg.batch_size]
        logits = model(split.x_train[idx])
        loss = F.cross_entropy(logits, split.y_train[idx])
        opt.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            skipped += 1
            continue
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        if not torch.isfinite(grad_norm):
            skipped += 1
            continue
        opt.step()
        losses.append(loss.item())
        correct += int((logits.argmax(-1) == split.y_train[idx]).sum())
    return {
        "train_loss": sum(losses) / len(losses) if losses else math.nan,
        "train_accuracy": correct / len(perm),
        "skipped_steps": skipped,
        "epoch_time": time.perf_counter() - t0,
    }


def _initial_row(model: ViT, split: Split, eval_images) -> dict:
    row = _evaluate(model, split, eval_images)
    with torch.no_grad():
        logits = model(split.x_train)
    row.update(train_loss=F.cross_entropy(logits, split.y_train).item(),
               train_accuracy=(logits.argmax(-1) == split.y_train).double().mean().item(),
               skipped_steps=0, epoch_time=math.nan)
    return row


def _append(hist: dict, row: dict) -> None:
    for k in hist:
        hist[k].append(row[k])


def _lab_fields(value: dict, where: str) -> dict:
    """``**overrides`` of :func:`run_experiment`: fields of :class:`LabConfig` (not ``seed``, an option of its own)."""
    known = [f for f in LabConfig.__dataclass_fields__ if f != "seed"]
    for name, given in value.items():
        if name not in known:
            raise InvalidOptionError(name, given, f"left out: it is no field of toolkit.lab.LabConfig, whose fields "
                                     f"are {', '.join(known)}", where)
    return value


@checks_options(activations=Names("attention activations, e.g. 'x³/16' (UnknownActivationError for one that "
                                  "cannot be read)"),
                epochs=Optional(Whole(minimum=0)), out=Optional(PathName()), seed=Check(options.seed, -1),
                preset=OneOf(tuple(PRESETS)), resume=Flag(), checkpoint_dir=Optional(PathName()),
                checkpoints=Flag(), threads=Optional(Whole(minimum=1)), progress=Flag(),
                callback=Optional(Function(signature="callback(activation_label, epoch)")),
                overrides=Check(_lab_fields, {"no_such_field": 1}))
def run_experiment(activations: Sequence[str] = PAPER_ACTIVATIONS, epochs: int | None = None,
                   out: str | os.PathLike | None = None, seed: int = 0, preset: str = "full", *,
                   resume: bool = True, checkpoint_dir: str | os.PathLike | None = None,
                   checkpoints: bool = True, threads: int | None = 1, progress: bool = False,
                   callback: Callable[[str, int], None] | None = None,
                   **overrides) -> xr.Dataset:
    """Train the ViT once per activation and record attention norms per epoch.

    Parameters
    ----------
    activations : sequence of str
        Attention activations (see :func:`toolkit.lab.parse_activation`);
        default the paper's five: softmax, x/1, x/16, x³/1, x³/16.
    epochs : int, optional
        Epochs per activation; default the preset's (200 full, 3 fast).
    out : path, optional
        NetCDF file rewritten after every epoch; with ``resume`` an existing
        file and its checkpoints are continued. None keeps everything in memory.
    seed : int
        Seeds the weights (identical for every activation) and the shuffling.
    preset : str
        Model and training settings, one of :data:`PRESETS` (``"full"``, N = 17;
        ``"fast"``; ``"up16"``, ``"patch1"``, ``"up16-wide"``, N = 65;
        ``"up32"``, N = 257).
    resume : bool
        Continue from ``out`` and its checkpoints (default). False starts over.
    checkpoint_dir : path, optional
        Where model/optimizer checkpoints go; default ``<out>.tmp-checkpoints``.
    checkpoints : bool
        Save a checkpoint per activation after every epoch (default), so an
        interrupted or extended run continues where it stopped. False writes
        none (only ``out``): nothing is left beside it, and a later call
        retrains from epoch 0 (what a notebook's throw-away run wants).
    threads : int, optional
        torch CPU threads during the run (restored afterwards); default 1, the
        fastest for a model this small. None leaves torch's setting.
    progress : bool
        Print one line per activation as it finishes.
    callback : callable, optional
        ``callback(activation_label, epoch)`` after each recorded epoch.
    **overrides
        Fields of :class:`LabConfig` (``dim``, ``lr``, ...).

    Returns
    -------
    xarray.Dataset
        dims (activation, epoch, layer, head), see
        :func:`toolkit.lab.dataset.build_dataset`. Attrs include
        ``num_tokens`` (N), ``sqrt_n_bound`` (√N), ``image_size``,
        ``patch_size`` and ``head_dim``.

    Raises
    ------
    LabConfigMismatchError
        ``out`` holds a run with other settings (and ``resume`` is True).
    UnknownActivationError
        An activation that cannot be read.

    Examples
    --------
    >>> ds = run_experiment(["softmax", "x²/4"], preset="fast", out="lab.nc")  # doctest: +SKIP
    >>> toolkit.plot.layer_grid(ds, "attention_norm")  # doctest: +SKIP
    """
    if preset not in PRESETS:
        raise InvalidOptionError("preset", preset, f"one of {', '.join(PRESETS)}", "run_experiment")
    seed = options.seed(seed, "run_experiment")
    if threads is not None:
        threads = options.whole_number(threads, "threads", "run_experiment", minimum=1)
    cfg = replace(PRESETS[preset], seed=seed, **overrides)
    if epochs is not None:
        cfg = replace(cfg, epochs=options.whole_number(epochs, "epochs", "run_experiment", minimum=0))
    acts = list({a.label: a for a in map(parse_activation, activations)}.values())
    labels = [a.label for a in acts]
    out = Path(out) if out is not None else None
    ckdir = Path(checkpoint_dir) if checkpoint_dir else (
        out.with_name(out.name + ".tmp-checkpoints") if out else None)
    if not checkpoints:
        ckdir = None
    if cfg.image_size % cfg.patch_size:
        raise InvalidOptionError("patch_size", cfg.patch_size, f"a divisor of image_size {cfg.image_size}",
                                 "run_experiment")
    if cfg.dim % cfg.heads:
        raise InvalidOptionError("heads", cfg.heads, f"a divisor of dim {cfg.dim}", "run_experiment")
    split = load_digits_split(train_subset=cfg.train_subset or None, image_size=cfg.image_size)
    eval_images = split.x_test[:cfg.eval_batch]
    n_tokens = cfg.num_tokens
    attrs = dict(title="Attention norm per layer over training, per attention activation",
                 preset=preset, config=cfg.model_json(), epochs=cfg.epochs, seed=seed,
                 num_tokens=n_tokens, sqrt_n_bound=math.sqrt(n_tokens), image_size=cfg.image_size,
                 patch_size=cfg.patch_size, head_dim=cfg.dim // cfg.heads,
                 dataset=DATASET_NAME, model="ViT, pre-norm, class token, learned positions",
                 reference=REFERENCE, torch_version=str(torch.__version__))

    saved: dict[str, dict] = {}
    if out is not None and resume and out.exists():
        old = lab_ds.read_netcdf(out)
        if old.attrs.get("config") != cfg.model_json():
            raise LabConfigMismatchError(out, old.attrs.get("config", "?"), cfg.model_json())
        saved = lab_ds.histories_from_dataset(old)

    histories = {label: lab_ds.new_history() for label in labels}

    def write():
        ds = lab_ds.build_dataset(histories, epochs=cfg.epochs, depth=cfg.depth,
                                  heads=cfg.heads, attrs=attrs)
        if out is not None:
            lab_ds.write_netcdf(ds, out)
        return ds

    with _cpu_settings(threads):
        for act in acts:
            label = act.label
            hist = histories[label]
            if len(saved.get(label, {}).get("train_loss", [])) > cfg.epochs:
                histories[label] = saved[label]  # already trained this far
                continue
            torch.manual_seed(cfg.seed)
            model = ViT(act, image_size=cfg.image_size, patch_size=cfg.patch_size, dim=cfg.dim,
                        depth=cfg.depth, heads=cfg.heads, mlp_ratio=cfg.mlp_ratio)
            opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
            gen = torch.Generator().manual_seed(cfg.seed + 1)
            ck = _checkpoint_path(ckdir, label) if ckdir else None
            if resume and ck is not None and ck.exists():
                state = torch.load(ck, weights_only=True)
                if state["config"] != cfg.model_json():
                    raise LabConfigMismatchError(ck, state["config"], cfg.model_json())
                model.load_state_dict(state["model"])
                opt.load_state_dict(state["optimizer"])
                gen.set_state(state["generator"])
                histories[label] = hist = lab_ds.complete_history(state["history"], cfg.depth)
            else:
                _append(hist, _initial_row(model, split, eval_images))
            for epoch in range(len(hist["train_loss"]), cfg.epochs + 1):
                row = _train_epoch(model, opt, split, cfg, gen)
                row.update(_evaluate(model, split, eval_images))
                _append(hist, row)
                if ck is not None:
                    _save_atomic({"config": cfg.model_json(), "activation": label, "epoch": epoch,
                                  "model": model.state_dict(), "optimizer": opt.state_dict(),
                                  "generator": gen.get_state(), "history": hist}, ck)
                write()
                if callback is not None:
                    callback(label, epoch)
            if progress:
                times = [t for t in hist["epoch_time"][1:] if t == t]
                print(f"{label:>8}: test accuracy {hist['test_accuracy'][cfg.epochs]:.3f}, "
                      f"{sum(times) / max(len(times), 1):.2f} s/epoch", flush=True)
    return write()
