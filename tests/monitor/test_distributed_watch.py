"""Distributed training on this machine's CPUs: two gloo processes, DDP and FSDP; rank 0 records."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import toolkit

SCRIPT = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    import toolkit
    from toolkit.testing import tiny_model
    wrap, store, ref = sys.argv[1], sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = tiny_model("llama", num_layers=2).train()
    if wrap == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        model = FSDP(model, device_id=torch.device("cpu"), use_orig_params=False)
    monitor = toolkit.watch(model, ["frobenius_norm"], every=2, store=store)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    for step in range(5):
        ids = torch.randint(0, 96, (2, 8), generator=gen)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step(); opt.zero_grad()
        monitor.step(step)
    monitor.close()
    if wrap == "fsdp":
        ctx = FSDP.summon_full_params(model, writeback=False, rank0_only=True)
    else:
        import contextlib; ctx = contextlib.nullcontext()
    with ctx:
        if rank == 0:
            inner = model.module
            w = dict((n.replace("_fsdp_wrapped_module.", ""), p) for n, p in inner.named_parameters())
            torch.save({n: p.detach().clone() for n, p in w.items()}, ref)
    print("rank", rank, "recording", monitor.recording, monitor.plan is not None)
    dist.destroy_process_group()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_two_gloo_processes_record_on_rank_0_only(tmp_path, wrap):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    store, ref = tmp_path / "run.watch", tmp_path / "final.pt"
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2",
           "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(script), wrap, str(store), str(ref)],
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outs)
    assert "rank 0 recording True True" in outs[0] and "rank 1 recording False False" in outs[1]
    ds = toolkit.load(store)
    assert list(ds.step.values) == [0, 2, 4]
    final = torch.load(ref)
    w = final["model.layers.1.self_attn.q_proj.weight"].double()
    assert float(ds.frobenius_norm.sel(step=4, layer=1, component="attn.q")) == pytest.approx(
        float(torch.linalg.norm(w)), rel=1e-6)
    assert np.isfinite(ds.relative_change_since_start.sel(step=4)).any()
