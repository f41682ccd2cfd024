"""Matching the tensors of two checkpoints for :func:`toolkit.collect.compare.compare`.

Tensors are matched by the parameter name ``transformers`` gives them (the
sources already rename GGUF and legacy names). Tied embeddings are counted
once: a side whose output head is its input embedding (``tie_word_embeddings``
or no output head stored) contributes its input embedding once; a tied side
against an untied one pairs the untied output head with the tied side's
input embedding, which is its output matrix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from toolkit.collect.plan.cell_ids import cut_id
from toolkit.collect.plan.experts import with_expert_slices
from toolkit.collect.plan.types import Plan
from toolkit.errors import CheckpointMismatchError
from toolkit.sources.base import TensorRecord

_OUTPUT = re.compile(r"(^|\.)(lm_head|embed_out)\.weight$")
_INPUT = re.compile(r"(^|\.)(embed_tokens|wte|word_embeddings|embed_in)\.weight$")
#: Non-parameter buffers some formats store and others do not; never compared.
_BUFFERS = re.compile(r"(inv_freq|\.attn\.bias|\.attn\.masked_bias|position_ids)$")


@dataclass
class TensorPair:
    """One stored tensor of each side, to be compared.

    Attributes
    ----------
    name : str
        The base side's parameter name (``"lm_head.weight -> model.embed_tokens.weight"``
        when a tied side's input embedding stands in for an output head).
    base, target : TensorRecord
    pieces : list of Piece
        The grid cells it holds (empty for embeddings, norms, biases).
    """

    name: str
    base: TensorRecord
    target: TensorRecord
    pieces: list = field(default_factory=list)


def _tied(plan: Plan, names) -> bool:
    flag = plan.source.config.get("tie_word_embeddings")
    return bool(flag) if flag is not None else not any(_OUTPUT.search(n) for n in names)


def _describe(plan: Plan) -> str:
    cfg = plan.source.config
    return f"{cfg.get('model_type', '?')}, {plan.num_layers} layers ({plan.source.location})"


def _cuts(pieces) -> list:
    return [(p.layer, p.component, getattr(p.extract, "index", None)) for p in pieces]


def pair_tensors(base: Plan, target: Plan) -> tuple[list[TensorPair], list[str]]:
    """Pair every stored tensor of ``base`` with the same tensor of ``target``.

    Returns
    -------
    pairs : list of TensorPair
        In the base's file order.
    skipped : list of str
        Names left out: duplicate tied output heads and buffers one side lacks.

    Raises
    ------
    CheckpointMismatchError
        Naming the first tensor (in the base's order, then the target's) that
        one side lacks, whose shape differs, or that maps to other
        components; the message says both sides' architecture and layers.
    """
    b_recs, t_recs = with_expert_slices(base), with_expert_slices(target)  # a sliced expert stack: per expert
    b_pieces = {t.record.name: list(t.pieces) for t in base.tensors}
    t_pieces = {t.record.name: list(t.pieces) for t in target.tensors}
    tied_b, tied_t = _tied(base, b_recs), _tied(target, t_recs)
    where = f"base is {_describe(base)}; target is {_describe(target)}"

    def mismatch(name, b, t, reason):
        raise CheckpointMismatchError(name, b, t, f"{reason}; {where}")

    def input_embedding(recs, side, name):
        found = [r for n, r in recs.items() if _INPUT.search(n)]
        if len(found) != 1:
            mismatch(name, "output head" if side == "target" else "absent",
                     "absent" if side == "target" else "output head",
                     f"the {side} stores no output head and no single input embedding to stand for it")
        return found[0]

    pairs, skipped = [], []
    for name, b in b_recs.items():
        t = t_recs.get(name)
        if _OUTPUT.search(name):
            if tied_b and tied_t:
                skipped.append(name)  # both tied: counted once, with the input embedding
                continue
            if t is None and tied_t:
                t = input_embedding(t_recs, "target", name)
                name = f"{name} -> {t.name}"
        if t is None:
            if _BUFFERS.search(name):
                skipped.append(name)
                continue
            mismatch(name, f"shape {tuple(b.shape)}", "absent", "the target has no such tensor")
        if tuple(b.shape) != tuple(t.shape):
            mismatch(name, f"shape {tuple(b.shape)}", f"shape {tuple(t.shape)}", "shapes differ")
        bp = b_pieces.get(b.name, [])
        tp = t_pieces.get(t.name, [])
        if [p.key for p in bp] != [p.key for p in tp]:
            mismatch(name, [p.key for p in bp], [p.key for p in tp], "it holds different components on each side")
        if [cut_id(p) for p in bp] != [cut_id(p) for p in tp]:
            mismatch(name, _cuts(bp), _cuts(tp), "its fused components are split differently on each side (the "
                     "configs declare other head counts or sizes); fix the config that does not belong to its weights")
        pairs.append(TensorPair(name, b, t, list(bp)))
    for name, t in t_recs.items():
        if name in b_recs:
            continue
        if _OUTPUT.search(name):
            if tied_t:
                skipped.append(name)  # the target's copy of its own input embedding
                continue
            if tied_b:
                b = input_embedding(b_recs, "base", name)
                if tuple(b.shape) != tuple(t.shape):
                    mismatch(name, f"shape {tuple(b.shape)}", f"shape {tuple(t.shape)}", "shapes differ")
                pairs.append(TensorPair(f"{b.name} -> {name}", b, t, []))
                continue
        if _BUFFERS.search(name):
            skipped.append(name)
            continue
        mismatch(name, "absent", f"shape {tuple(t.shape)}", "the base has no such tensor")
    return pairs, skipped


def select_pairs(pairs: list[TensorPair], selected) -> list[TensorPair]:
    """The pairs holding a selected cell, each with only its selected pieces (all of ``pairs`` when
    ``selected`` keeps everything: embeddings and norms are then summed too).

    Parameters
    ----------
    pairs : list of TensorPair
    selected : toolkit.collect.plan.selection.Selected
    """
    if selected.everything:
        return pairs
    out = []
    for tp in pairs:
        kept = [p for p in tp.pieces if selected.keeps(p)]
        if kept:
            out.append(replace(tp, pieces=kept))
    return out
