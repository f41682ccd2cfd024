"""``activation_stats``: texts through a model -> (layer, component) and (layer, head) Dataset.

The front door of the activations pass, shaped as the weights pass: options checked
(:mod:`toolkit.constraints`), texts tokenised, then a hook plan (:mod:`.hook_plan`: which
modules, made without running the model) -> the batches through the model with the hooks on
(:mod:`.runner`) -> the Dataset (:mod:`.assemble`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import xarray as xr

from toolkit.activations.assemble import activation_dataset, run_attrs
from toolkit.activations.hook_plan import plan_hooks
from toolkit.activations.inputs import as_texts, check_token_ids, texts_option, tokenize
from toolkit.activations.model import load_model
from toolkit.activations.runner import run_batches
from toolkit.collect.pass_options import ADDRESS, PASS, SELECTION
from toolkit.collect.plan.selection import Selection
from toolkit.constraint_types import Exempt
from toolkit.constraints import Check, Flag, Function, Optional, Whole, checks_options


@checks_options(source=Exempt("the model: a checkpoint as weight_stats takes it (SourceTypeError / "
                              "SourceNotFoundError), or a loaded transformers model"),
                texts=Check(texts_option, 3),
                tokenizer=Optional(Function(what="a transformers tokenizer (a callable)")),
                gguf_file=ADDRESS["gguf_file"], revision=ADDRESS["revision"],
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
    plan = plan_hooks(model, Selection.of(layers, components, experts), mapping=mapping)
    recorded = run_batches(model, plan, ids, batch_size=batch_size, attention=attention, gradients=gradients,
                           pad_id=_pad_id(loaded.tokenizer, model.config.to_dict()), progress=progress)
    attrs = run_attrs(plan, model, loaded.attrs, recorded, texts_origin=texts_origin, ids=ids,
                      max_tokens=max_tokens, batch_size=batch_size, attention=attention)
    return activation_dataset(plan, recorded, attrs, texts, ids, fill=fill)


def _pad_id(tokenizer, config) -> int:
    """Any valid token id for padding positions (they are masked and never measured)."""
    for v in (getattr(tokenizer, "pad_token_id", None), config.get("pad_token_id"), 0):
        if isinstance(v, int) and v >= 0:
            return v
    return 0

