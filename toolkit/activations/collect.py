"""``activation_stats``: texts through a model -> (layer, component) and (layer, head) Dataset."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack

import numpy as np
import torch
import xarray as xr

from toolkit.activations import definitions as D
from toolkit.activations.attention import AttentionRecorder, eager_attention
from toolkit.activations.dataset import add_head_variables
from toolkit.activations.gradients import gradient_norms, next_token_loss_sum, only_grad_for
from toolkit.activations.hooks import Batch, ComponentRecorder, Target
from toolkit.activations.inputs import as_texts, batches, check_token_ids, tokenize
from toolkit.activations.model import load_model
from toolkit.activations.progress import layer_progress
from toolkit.activations.routing import RouterRecorder, router_variables
from toolkit.architectures import resolve_adapter
from toolkit.collect.assemble.grid import build_grid_dataset, with_unselected
from toolkit.collect.cells import Cell
from toolkit.collect.pass_options import ADDRESS, PASS, SELECTION
from toolkit.collect.plan.selection import Selection
from toolkit.constraints import Flag, Function, Optional, Whole, checks_options
from toolkit.errors import SelectionError, UnmappedParametersError


@checks_options(tokenizer=Optional(Function("(a transformers tokenizer)")), gguf_file=ADDRESS["gguf_file"],
                revision=ADDRESS["revision"],
                max_tokens=Whole(minimum=2, meaning="texts are cut to this many tokens; each needs at least 2"),
                batch_size=Whole(minimum=1, meaning="texts per forward pass"), attention=Flag(), gradients=Flag(),
                mapping=PASS["mapping"], progress=PASS["progress"], **SELECTION)
def activation_stats(
    source=None,
    texts=None,
    *,
    tokenizer=None,
    gguf_file: str | None = None,
    revision: str | None = None,
    max_tokens: int = 512,
    batch_size: int = 8,
    attention: bool = True,
    gradients: bool = True,
    mapping=None,
    progress: bool | Callable[[int, int, str], None] = True,
    layers=None,
    components=None,
    experts=None,
    fill: bool = False,
) -> xr.Dataset:
    """Activation, attention and gradient statistics of a model on texts.

    Forward hooks on every component module (and on each layer's attention
    module) reduce what passes through them to running sums while the texts
    run in batches; no activation tensor or attention map outlives its layer.

    Parameters
    ----------
    source : str, path-like, Source, transformers model, Loaded, or None
        None: the embedded SmolLM2-135M-Instruct GGUF. A ``.gguf`` file, a
        checkpoint folder, a hub id: loaded with ``transformers`` in float32
        (GGUF dequantised). A loaded ``PreTrainedModel``: used as is (its
        attention implementation is switched to eager for the run and back).
        A :class:`~toolkit.activations.Loaded` from :func:`load_model`: its
        model and tokenizer (load once, run many text sets).
    texts : list of str, list of list of int, str, path-like, or None
        None: the default ``data/prompts.txt`` (installed with the package). Strings are
        tokenised (special tokens added, truncated to ``max_tokens``); lists
        of int are token ids. A ``pathlib.Path``: a file of texts separated
        by ``---`` lines.
    tokenizer : transformers tokenizer, optional
        Default: the source's own (required for string texts with a loaded model).
    gguf_file, revision : str, optional
        As in :func:`toolkit.open_source`.
    max_tokens : int, default 512
        Texts are cut to this many tokens.
    batch_size : int, default 8
        Texts per forward pass (texts of similar length are batched together).
    attention : bool, default True
        Record attention maps (eager implementation) and their statistics.
    gradients : bool, default True
        Backpropagate the next-token loss (decoders only) for ``gradient_norm``.
    mapping : toolkit.Mapping, optional
        Parameter-name -> component mapping for an unregistered family.
    layers, components, experts, fill
        Part of the model, as :func:`toolkit.weight_stats` takes it
        (:mod:`toolkit.collect.plan.selection`): only the selected components
        are hooked (attention maps only for the selected layers, and only
        when an attention component is selected; routers likewise); the
        forward pass is the whole model's. ``experts`` selects the ``expert``
        coordinate of the router statistics.
    progress : bool or callable
        True: a tqdm bar; a callable ``progress(done, total, name)``. A unit
        is one layer's forward or backward pass of one batch (total: batches
        x layers x 2 with gradients, x 1 without), so the count moves inside
        each batch; ``name`` says ``"batch 1/2 (16 texts): layer 3 forward"``.

    Returns
    -------
    xarray.Dataset
        Dims ``layer``, ``component`` (canonical order, NaN where the family
        lacks one), ``head`` (query heads), ``kv_head`` (key/value heads),
        ``text``. Variables (attrs ``long_name``, ``units``, ``description``,
        ``reference``):

        - (layer, component): ``output_rms``, ``input_rms``,
          ``activation_kurtosis``, ``max_abs_activation``, ``gradient_norm``;
        - (layer, head): ``attention_frobenius_norm``, ``attention_entropy``,
          ``attention_sink_mass`` (mean over texts), each with ``<name>_std``
          (spread over texts) and ``<name>_per_text`` (layer, head, text);
          ``query_head_rms``;
        - (layer, kv_head): ``key_head_rms``, ``value_head_rms``;
        - (text): ``prompt`` (the text), coords ``n_tokens``, ``text_preview``.

        Coords as the weight Dataset (``parameter_name``, ``n_rows``,
        ``n_cols``, ``nan_reason``) plus ``kv_group`` (head): the kv head each
        query head reads. Attrs: ``source``, ``model_type``, head counts,
        ``num_texts``, ``num_tokens``, ``mean_next_token_loss`` (nats)...

    Raises
    ------
    SourceNotFoundError
        ``transformers`` cannot load ``source``.
    UnsupportedArchitectureError, UnmappedParametersError
        No component mapping for the model (pass ``mapping=``).
    AttentionUnavailableError
        The model returns no attention map, or one that is not causal or
        whose rows do not sum to 1 (pass ``attention=False`` to skip).
    TokenizerMissingError, EmptyInputError
        String texts without a tokenizer; no texts, or a text of < 2 tokens.
    TextInputError
        Texts that are bytes, neither str nor token ids, a mix of both, a str
        with a lone surrogate, a token id outside the model's vocabulary, a
        prompts file that is not UTF-8 (``TextFileNotFoundError``: no such file).
    InvalidOptionError
        ``max_tokens`` < 2, ``batch_size`` < 1, a flag that is not a bool...
        (before the model is loaded).

    Notes
    -----
    Texts are right-padded and padding is excluded from every statistic.
    Each batch runs one forward pass (with the hooks) and, for decoders with
    ``gradients=True``, one backward pass of the summed token losses; the
    gradients accumulate, and ``gradient_norm`` is the norm of their sum
    divided by the number of predicted tokens: the gradient of the mean loss,
    independent of the batching. Running sums are float64
    (:class:`~toolkit.activations.hooks.Moments`). Memory: the model, one
    gradient per component weight, and one batch's activations for backward.

    Examples
    --------
    >>> from toolkit.activations import activation_stats, load_model   # doctest: +SKIP
    >>> ds = activation_stats(max_tokens=128)        # embedded SmolLM2, packaged prompts.txt
    >>> int(ds.max_abs_activation.sel(component="mlp.down").argmax("layer"))
    11
    >>> m = load_model("Qwen/Qwen2.5-0.5B")            # load once, run several text sets
    >>> code = activation_stats(m, ["def f(x):\n    return x + 1"], gradients=False)
    """
    selection = Selection.of(layers, components, experts)
    if texts is None:
        texts_origin = "default (data/prompts.txt of the toolkit)"
    else:
        texts_origin = str(texts) if isinstance(texts, os.PathLike) else "given"
    texts = as_texts(texts)
    loaded = load_model(source, tokenizer=tokenizer, gguf_file=gguf_file, revision=revision)
    model = loaded.model
    ids = tokenize(texts, loaded.tokenizer, max_tokens=max_tokens,
                   source=f"{loaded.attrs.get('source')} ({loaded.tokenizer_error})" if loaded.tokenizer_error
                   else loaded.attrs.get("source", ""))
    embedding = model.get_input_embeddings() if callable(getattr(model, "get_input_embeddings", None)) else None
    if embedding is not None and hasattr(embedding, "num_embeddings"):
        check_token_ids(ids, int(embedding.num_embeddings), tokenized=isinstance(texts[0], str))
    config = model.config.to_dict()
    params = dict(model.named_parameters())
    adapter = resolve_adapter(config, list(params), mapping=mapping)
    pieces = _map_pieces(adapter, params)
    chosen = selection.resolve(int(adapter.num_layers), {c for _, c in pieces},
                               int(getattr(adapter, "num_experts", 0) or 0))
    model_pieces, pieces = pieces, {k: p for k, p in pieces.items() if chosen.keeps_cell(*k)}
    if not pieces:
        raise SelectionError("selection", chosen.describe(), "no component module of the model is in it")
    dims = adapter.dims
    device = next(model.parameters()).device

    targets: dict = {}
    weights = {}
    layer_modules: dict = {}  # {layer: [module]}: what the progress bar counts
    for key, piece in pieces.items():
        module = adapter.find_module(model, piece)
        idx = piece.out_index.to(device) if torch.is_tensor(piece.out_index) else piece.out_index
        targets.setdefault(module, []).append(Target(key, idx))
        weights[key] = module.weight
        layer_modules.setdefault(key[0], []).append(module)
    attn_modules = {layer: adapter.find_module(model, p.module_name.rsplit(".", 1)[0])
                    for (layer, comp), p in model_pieces.items()
                    if comp == "attn.q" and _records(chosen, layer, "attn.")}
    routers = {layer: adapter.find_module(model, p) for (layer, comp), p in model_pieces.items()
               if comp == "mlp.router" and _records(chosen, layer, "mlp.router")}
    causal = all(getattr(m, "is_causal", True) for m in attn_modules.values())
    has_loss = causal and callable(getattr(model, "get_output_embeddings", None)) \
        and model.get_output_embeddings() is not None
    do_grad = gradients and has_loss

    plan = batches(ids, batch_size=batch_size, pad_id=_pad_id(loaded.tokenizer, config))
    current: dict = {}
    comp = ComponentRecorder(targets, lambda: current["batch"])
    routing = RouterRecorder(routers, lambda: current["batch"], adapter.num_experts) \
        if routers and hasattr(adapter, "num_experts") else None
    att = AttentionRecorder(attn_modules, lambda: current["batch"], num_texts=len(ids),
                            num_heads=dims.num_attention_heads, causal=causal,
                            model_type=adapter.family) if attention else None
    loss_sum, count, grads = 0.0, 0, {}
    was_training = model.training
    model.eval()
    try:
        with ExitStack() as stack:
            if attention:
                stack.enter_context(eager_attention(model))
            if do_grad:
                stack.enter_context(only_grad_for(model, list(weights.values())))
            stack.enter_context(comp)
            if routing is not None:
                stack.enter_context(routing)
            if att is not None:
                stack.enter_context(att)
            # after only_grad_for: the bar's gradient hooks need weights that require grad
            report = stack.enter_context(layer_progress(progress, layer_modules, num_batches=len(plan),
                                                        backward=do_grad))
            for done, b in enumerate(plan, start=1):
                report.start_batch(done, len(b.lengths))
                input_ids, mask = b.input_ids.to(device), b.attention_mask.to(device)
                current["batch"] = Batch(mask.bool(), b.lengths, b.text_index)
                if att is not None:
                    att.start_batch()
                with torch.set_grad_enabled(do_grad):
                    out = model(input_ids=input_ids, attention_mask=mask, use_cache=False)
                if att is not None:
                    att.check_batch()
                if has_loss:
                    loss, n = next_token_loss_sum(out.logits, input_ids, mask)
                    if do_grad:
                        loss.backward()
                    loss_sum, count = loss_sum + float(loss.detach()), count + n
                del out
                report.end_batch()
            if do_grad:
                grads = gradient_norms(pieces, weights, count)
    finally:
        model.train(was_training)

    cells = {}
    for key, piece in pieces.items():
        acc = comp.acc[key]
        cell = Cell(piece.parameter_name, tuple(piece.extract(weights[key].detach()).shape))
        if comp.calls[key]:
            cell.values.update(output_rms=acc.output.rms, input_rms=comp.input_rms(key),
                               activation_kurtosis=acc.output.kurtosis, max_abs_activation=acc.output.max_abs)
        else:
            cell.reasons["activations"] = "the module never ran"
        cell.values["gradient_norm"] = grads.get(key, float("nan"))
        if key not in grads:
            cell.reasons["gradient_norm"] = "no next-token loss (encoder or headless model)" if not has_loss \
                else "gradients=False"
        cells[key] = cell
    attrs = {
        **loaded.attrs, "kind": "activations", "model_type": adapter.family,
        "num_hidden_layers": int(adapter.num_layers), "num_attention_heads": int(dims.num_attention_heads),
        "num_key_value_heads": int(dims.num_key_value_heads), "head_dim": int(dims.head_dim),
        "attention": "causal" if causal else "bidirectional",
        "attn_implementation": "eager" if attention else str(getattr(model.config, "_attn_implementation", "")),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "texts": texts_origin, "num_texts": len(ids),
        "num_tokens": int(sum(map(len, ids))), "max_tokens": int(max_tokens), "batch_size": int(batch_size),
        "mean_next_token_loss": loss_sum / count if count else float("nan"),
    }
    ds = build_grid_dataset(int(adapter.num_layers), cells, list(D.GRID_STATS), attrs)
    if routing is not None:
        ds = ds.assign(router_variables(routing, int(adapter.num_layers))).assign_coords(
            expert=("expert", np.arange(routing.num_experts), {"long_name": "routed expert"}))
    ds = add_head_variables(ds, comp, att, dims, texts, ids)
    return _selected(ds, chosen, fill)


def _records(chosen, layer: int, prefix: str) -> bool:
    """Whether a per-layer recorder (attention maps: ``"attn."``; router: ``"mlp.router"``) runs on ``layer``."""
    return (chosen.layers is None or layer in chosen.layers) and (
        chosen.components is None or any(c.startswith(prefix) for c in chosen.components))


def _selected(ds: xr.Dataset, chosen, fill: bool) -> xr.Dataset:
    """``ds`` cut to the selection (``fill``: the whole grid, the cells left out marked)."""
    if chosen.everything:
        return ds
    ds.attrs["selection"] = chosen.describe()
    if chosen.experts is not None and "expert" in ds.dims:
        ds = ds.sel(expert=list(chosen.experts))
    if fill:
        return with_unselected(ds, chosen)
    if chosen.layers is not None:
        ds = ds.sel(layer=list(chosen.layers))
    if chosen.components is not None:
        ds = ds.sel(component=[c for c in ds.component.values if c in chosen.components])
    return ds


def _map_pieces(adapter, params) -> dict:
    """``{(layer, component): Piece}`` of the model's parameters, checked like the weight plan (routed
    experts left out: see :mod:`toolkit.activations.routing` for what the routers do with them)."""
    pieces, seen = {}, {}
    for name in params:
        for p in adapter.pieces(name):
            if p.expert is not None:
                continue  # a routed expert has no module of its own (its 3-D stack is one module)
            key = (p.layer, p.component)
            if key in seen:
                raise UnmappedParametersError(
                    f"two parameters map to layer {p.layer} {p.component}: {seen[key]!r} and {name!r}; "
                    "fix the mapping so each component has one matrix per layer")
            seen[key], pieces[key] = name, p
    if not pieces:
        raise UnmappedParametersError(
            f"no parameter of the model maps to an attention or MLP component (model_type "
            f"{adapter.family!r}); pass mapping=toolkit.Mapping({{...}})", list(params))
    adapter.check_layers(layer for layer, _ in pieces)
    return pieces


def _pad_id(tokenizer, config) -> int:
    """Any valid token id for padding positions (they are masked and never measured)."""
    for v in (getattr(tokenizer, "pad_token_id", None), config.get("pad_token_id"), 0):
        if isinstance(v, int) and v >= 0:
            return v
    return 0

