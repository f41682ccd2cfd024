"""The training run: settings, the loop, checkpoints and ``run.json``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from toolkit import options
from toolkit._version import __version__
from toolkit.atomic import atomic_write
from toolkit.constraint_types import Exempt
from toolkit.constraints import Check, Flag, OneOf, Optional, PathName, Progress, Real, Whole, checks_options
from toolkit.data import data_path
from toolkit.errors import CheckpointFileError, EmptyInputError, ToolkitError
from toolkit.finetune.model import load_causal_lm, save_checkpoint, tokenize

#: Default training text.
DEFAULT_TEXT = data_path("finetune.txt")

#: Settings per preset. ``short``: the notebook and tests (3 checkpoints, seconds);
#: ``full``: 40 steps saving every 5 (9 checkpoints, a few minutes on 2 cores).
PRESETS: dict[str, dict] = {
    "short": dict(steps=4, save_every=2, seq_len=64, batch_size=2, lr=1e-4),
    "full": dict(steps=40, save_every=5, seq_len=128, batch_size=4, lr=5e-5),
}


@dataclass
class FinetuneRun:
    """A finished fine-tuning run.

    Attributes
    ----------
    out_dir : Path
    steps : list of int
        Training step of each saved checkpoint (0 first).
    checkpoints : list of Path
        The ``step-NNNNN`` folders, in step order.
    losses : list of float
        Training loss (nats per token) of steps 1..N.
    settings : dict
        What the run was made with (base, text hash, steps, lr...).
    seconds : float
        Wall time of the training run.
    """

    out_dir: Path
    steps: list[int]
    checkpoints: list[Path]
    losses: list[float] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def base(self) -> Path:
        """The step-0 checkpoint (the starting point in bf16)."""
        return self.checkpoints[0]

    @property
    def final(self) -> Path:
        """The last checkpoint."""
        return self.checkpoints[-1]


@checks_options(out_dir=PathName())
def load_run(out_dir: str | os.PathLike) -> FinetuneRun:
    """Read ``run.json`` of a finished run.

    Raises
    ------
    CheckpointFileError
        No finished run in ``out_dir`` (missing or unfinished ``run.json``, or a missing checkpoint).
    """
    out_dir = Path(out_dir)
    try:
        info = json.loads((out_dir / "run.json").read_text())
    except (OSError, ValueError) as e:
        raise CheckpointFileError(str(out_dir / "run.json"), f"no finished fine-tuning run here ({e})") from e
    if not info.get("complete"):
        raise CheckpointFileError(str(out_dir), "the fine-tuning run did not finish; run it again")
    ckpts = [out_dir / c["path"] for c in info["checkpoints"]]
    missing = [str(c) for c in ckpts if not (c / "model.safetensors").is_file()]
    if missing:
        raise CheckpointFileError(str(out_dir), f"checkpoints missing: {', '.join(missing)}")
    return FinetuneRun(out_dir, [int(c["step"]) for c in info["checkpoints"]], ckpts, list(info["losses"]),
                       dict(info["settings"]), float(info.get("seconds", 0.0)))


@checks_options(out_dir=PathName(), base=Exempt("the causal LM to start from: None (the embedded SmolLM2), a path or "
                                                 "hub id (load_causal_lm's typed errors) or a loaded model"),
                text=Optional(PathName()), preset=OneOf(tuple(PRESETS)), steps=Optional(Whole(minimum=1)),
                save_every=Optional(Whole(minimum=1)), seq_len=Optional(Whole(minimum=2)),
                batch_size=Optional(Whole(minimum=1)), lr=Optional(Real(above=0.0)), seed=Check(options.seed, -1),
                overwrite=Flag(), progress=Progress())
def finetune(out_dir: str | os.PathLike, *, base=None, text: str | os.PathLike | None = None,
             preset: str = "full", steps: int | None = None, save_every: int | None = None,
             seq_len: int | None = None, batch_size: int | None = None, lr: float | None = None,
             seed: int = 0, overwrite: bool = False, progress=True) -> FinetuneRun:
    """Fine-tune a causal LM on a text file and save bf16 checkpoints.

    Parameters
    ----------
    out_dir : str or path-like
        Run folder; gets ``step-00000/`` ... and ``run.json``.
    base : str, path-like or Source, optional
        Anything :func:`toolkit.open_source` accepts that holds a causal LM
        (GGUF is dequantised). Default: the embedded SmolLM2-135M-Instruct.
    text : str or path-like, optional
        UTF-8 training text; default :data:`DEFAULT_TEXT` (``data/finetune.txt``, installed with the package).
    preset : {"short", "full"}
        Defaults for the settings below (see :data:`PRESETS`).
    steps : int
        Optimiser steps.
    save_every : int
        Save a checkpoint every this many steps (and after the last one).
    seq_len, batch_size : int
        Tokens per sequence and sequences per step (random windows of the text).
    lr : float
        AdamW learning rate (constant, no weight decay, gradients clipped at norm 1).
    seed : int
        Seeds the windows and any dropout.
    overwrite : bool
        Replace a finished run made with other settings (else that is an error).
    progress : bool or callable
        A tqdm bar, or ``progress(step, steps, loss)`` after each step.

    Returns
    -------
    FinetuneRun
        If ``out_dir`` already holds a finished run with the same settings,
        that run, without training.

    Raises
    ------
    ToolkitError
        Unknown preset, or ``out_dir`` holds a run with other settings and
        ``overwrite`` is False.
    InvalidOptionError
        ``steps``, ``save_every``, ``batch_size`` < 1, ``seq_len`` < 2, ``lr`` <= 0,
        a seed outside 0 .. 2**64 - 1, or any of them not a number (before any work).
    TextInputError
        The training text is missing or not UTF-8.
    EmptyInputError
        The text has fewer than ``seq_len + 1`` tokens.
    CheckpointFileError
        The base lacks a parameter the model needs.
    """
    if preset not in PRESETS:
        raise ToolkitError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    where = "finetune"
    given = dict(steps=None if steps is None else options.whole_number(steps, "steps", where, minimum=1),
                 save_every=None if save_every is None else options.whole_number(save_every, "save_every", where,
                                                                                   minimum=1),
                 seq_len=None if seq_len is None else options.whole_number(seq_len, "seq_len", where, minimum=2),
                 batch_size=None if batch_size is None else options.whole_number(batch_size, "batch_size", where,
                                                                                   minimum=1),
                 lr=None if lr is None else options.real_number(lr, "lr", where, above=0.0))
    seed = options.seed(seed, where)
    cfg = {**PRESETS[preset], **{k: v for k, v in given.items() if v is not None}}
    out_dir, text_path = Path(out_dir), Path(text) if text is not None else DEFAULT_TEXT
    body = options.read_text_file(text_path, "training text")
    settings = {**cfg, "seed": seed, "text": str(text_path), "text_sha256": hashlib.sha256(body.encode()).hexdigest(),
                "base": _describe_base(base)}
    done = _previous_run(out_dir, settings, overwrite)
    if done is not None:
        return done
    model, tokenizer = load_causal_lm(base)
    ids = tokenize(body, tokenizer, model.config.vocab_size)
    if ids.numel() < cfg["seq_len"] + 1:
        raise EmptyInputError(f"{text_path} has {ids.numel()} tokens; seq_len={cfg['seq_len']} needs more")
    return _train(model, tokenizer, ids, out_dir, settings, cfg, seed, progress)


def _same(a: dict, b: dict) -> bool:
    """Same settings; the text is compared by its hash, not its path."""
    return {k: v for k, v in a.items() if k != "text"} == {k: v for k, v in b.items() if k != "text"}


def _previous_run(out_dir: Path, settings: dict, overwrite: bool) -> FinetuneRun | None:
    """The finished run in ``out_dir`` if it has these settings; else clear the folders a previous
    run of ours wrote (an unfinished one, or any with ``overwrite``) and return None."""
    manifest = out_dir / "run.json"
    if not manifest.is_file():
        if any(out_dir.glob("step-*")):
            raise ToolkitError(f"{out_dir} holds step-* folders that finetune did not write (no run.json); "
                               "choose an empty or new folder")
        return None
    try:
        info = json.loads(manifest.read_text())
    except (OSError, ValueError) as e:
        raise ToolkitError(f"{manifest} is not readable ({e}); delete it or choose another folder") from e
    if info.get("complete"):
        try:
            run = load_run(out_dir)
        except CheckpointFileError:
            run = None
        if run is not None and _same(run.settings, settings):
            return run
        if run is not None and not overwrite:
            raise ToolkitError(f"{out_dir} holds a fine-tuning run with other settings ({run.settings}); "
                               "pass overwrite=True (--overwrite) or choose another folder")
    for c in info.get("checkpoints", []):
        shutil.rmtree(out_dir / c["path"], ignore_errors=True)
    manifest.unlink()
    return None


def _describe_base(base) -> str:
    if base is None:
        from toolkit.bundled import default_model_path

        return str(default_model_path())
    return str(getattr(base, "location", base))


def _train(model, tokenizer, ids, out_dir: Path, settings: dict, cfg: dict, seed: int, progress) -> FinetuneRun:
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    n, every, seq, bs = cfg["steps"], cfg["save_every"], cfg["seq_len"], cfg["batch_size"]
    saved, losses, start = [], [], time.monotonic()
    bar = None
    if progress is True:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc="fine-tune", unit="step")

    def save(step):
        path = save_checkpoint(model, tokenizer, out_dir / f"step-{step:05d}", step=step,
                               loss=losses[-1] if losses else None)
        saved.append({"step": step, "path": path.name})
        _write_manifest(out_dir, settings, saved, losses, time.monotonic() - start, complete=False)

    save(0)
    model.train()
    try:
        for step in range(1, n + 1):
            starts = torch.randint(0, ids.numel() - seq, (bs,), generator=gen)
            batch = torch.stack([ids[s: s + seq] for s in starts.tolist()])
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
            elif callable(progress):
                progress(step, n, losses[-1])
            if step % every == 0 or step == n:
                save(step)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.monotonic() - start
    _write_manifest(out_dir, settings, saved, losses, seconds, complete=True)
    return load_run(out_dir)


def _write_manifest(out_dir, settings, saved, losses, seconds, *, complete):
    info = {"settings": settings, "checkpoints": saved, "losses": losses, "seconds": round(seconds, 2),
            "complete": complete, "toolkit_version": __version__}
    with atomic_write(out_dir / "run.json") as f:
        f.write(json.dumps(info, indent=1))
