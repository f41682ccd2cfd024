"""The transformers Trainer callback: records at the steps the Trainer takes, values against the weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import toolkit
from toolkit.errors import InvalidOptionError
from toolkit.integrations import WatchCallback
from toolkit.testing import tiny_model


def test_trainer_records_every_n_steps_with_gradients(tmp_path):
    from transformers import Trainer, TrainingArguments

    model = tiny_model("llama", num_layers=2).train()
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(0)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 96, (8, 12), generator=gen)]
    monitor = toolkit.watch(model, ["frobenius_norm"], every=2, gradients=True, store=tmp_path / "run.watch")
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=4, per_device_train_batch_size=2,
                             learning_rate=1e-2, report_to=[], use_cpu=True, save_strategy="no",
                             logging_strategy="no", disable_tqdm=True, seed=0)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[WatchCallback(monitor)]).train()
    ds = toolkit.load(tmp_path / "run.watch")
    assert list(ds.step.values) == [0, 2, 4]
    cell = dict(layer=1, component="mlp.down")
    name = "model.layers.1.mlp.down_proj.weight"
    assert str(ds.parameter_name.sel(step=4, **cell).values) == name
    w0, w4 = start[name].double(), dict(model.named_parameters())[name].detach().double()
    assert float(ds.frobenius_norm.sel(step=4, **cell)) == pytest.approx(float(torch.linalg.norm(w4)), rel=1e-6)
    assert float(ds.relative_change_since_start.sel(step=4, **cell)) == pytest.approx(
        float(torch.linalg.norm(w4 - w0) / torch.linalg.norm(w0)), rel=1e-6)
    grads = ds.gradient_norm.sel(**cell).values
    assert np.isnan(grads[0]) and np.all(np.isfinite(grads[1:])) and np.all(grads[1:] > 0)


def test_callback_takes_a_monitor_only():
    with pytest.raises(InvalidOptionError, match="toolkit.integrations.WatchCallback: monitor="):
        WatchCallback("every=10")
