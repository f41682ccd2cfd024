"""The batches of ``activation_stats`` through the model, with the hooks of a :class:`~.hook_plan.HookPlan` on.

:func:`run_batches` installs the recorders (component outputs, attention maps,
routers), runs each padded batch forward (and, for a decoder with gradients, the
summed next-token loss backward), and returns what they recorded; the model is
left as it was found (eval/train mode, attention implementation, requires_grad).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field

import torch

from toolkit.activations.attention import AttentionRecorder, eager_attention
from toolkit.activations.gradients import gradient_norms, next_token_loss_sum, only_grad_for
from toolkit.activations.hooks import Batch, ComponentRecorder
from toolkit.activations.inputs import batches
from toolkit.activations.progress import layer_progress
from toolkit.activations.routing import RouterRecorder

__all__ = ["Recorded", "run_batches"]


@dataclass
class Recorded:
    """What a run recorded.

    Attributes
    ----------
    components : ComponentRecorder
        Running output/input moments per cell.
    attention : AttentionRecorder or None
        Per-head attention statistics (None with ``attention=False``).
    routing : RouterRecorder or None
        Router statistics of the MoE layers (None without routers).
    loss_sum : float
        Summed next-token loss (nats) over ``count`` predicted tokens.
    count : int
    gradients : dict
        ``{(layer, component): float}``: the norm of the mean loss's gradient (empty without gradients).
    """

    components: ComponentRecorder
    attention: AttentionRecorder | None
    routing: RouterRecorder | None
    loss_sum: float = 0.0
    count: int = 0
    gradients: dict = field(default_factory=dict)


def run_batches(model, plan, ids: list, *, batch_size: int, pad_id: int, attention: bool, gradients: bool,
                progress) -> Recorded:
    """Run the token-id lists ``ids`` through ``model`` in batches with ``plan``'s hooks.

    Parameters
    ----------
    model : torch.nn.Module
    plan : toolkit.activations.hook_plan.HookPlan
    ids : list of list of int
        One token-id list per text.
    batch_size, pad_id : int
        Texts per forward pass; the id written at padding positions (masked, never measured).
    attention, gradients : bool
        Record attention maps (eager); backpropagate the next-token loss (when ``plan.has_loss``).
    progress : bool or callable
        As :func:`toolkit.activations.progress.layer_progress` takes it.

    Returns
    -------
    Recorded
    """
    dims = plan.adapter.dims
    device = next(model.parameters()).device
    do_grad = gradients and plan.has_loss
    plan_batches = batches(ids, batch_size=batch_size, pad_id=pad_id)
    current: dict = {}
    recorded = Recorded(
        ComponentRecorder(plan.targets, lambda: current["batch"]),
        AttentionRecorder(plan.attention_modules, lambda: current["batch"], num_texts=len(ids),
                          num_heads=dims.num_attention_heads, causal=plan.causal,
                          model_type=plan.adapter.family) if attention else None,
        RouterRecorder(plan.routers, lambda: current["batch"], plan.adapter.num_experts)
        if plan.routers and hasattr(plan.adapter, "num_experts") else None,
    )
    att = recorded.attention
    was_training = model.training
    model.eval()
    try:
        with ExitStack() as stack:
            if attention:
                stack.enter_context(eager_attention(model))
            if do_grad:
                stack.enter_context(only_grad_for(model, list(plan.weights.values())))
            for recorder in (recorded.components, recorded.routing, att):
                if recorder is not None:
                    stack.enter_context(recorder)
            # after only_grad_for: the bar's gradient hooks need weights that require grad
            report = stack.enter_context(layer_progress(progress, plan.layer_modules, num_batches=len(plan_batches),
                                                        backward=do_grad))
            for done, b in enumerate(plan_batches, start=1):
                report.start_batch(done, len(b.lengths))
                input_ids, mask = b.input_ids.to(device), b.attention_mask.to(device)
                current["batch"] = Batch(mask.bool(), b.lengths, b.text_index)
                if att is not None:
                    att.start_batch()
                with torch.set_grad_enabled(do_grad):
                    out = model(input_ids=input_ids, attention_mask=mask, use_cache=False)
                if att is not None:
                    att.check_batch()
                if plan.has_loss:
                    loss, n = next_token_loss_sum(out.logits, input_ids, mask)
                    if do_grad:
                        loss.backward()
                    recorded.loss_sum, recorded.count = recorded.loss_sum + float(loss.detach()), recorded.count + n
                del out
                report.end_batch()
            if do_grad:
                recorded.gradients = gradient_norms(plan.pieces, plan.weights, recorded.count)
    finally:
        model.train(was_training)
    return recorded
