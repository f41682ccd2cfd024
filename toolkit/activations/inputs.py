"""Texts in, right-padded batches out.

The default input is ``prompts.txt`` of the top-level ``data/``, installed with the package:
texts separated by lines holding only ``---`` (a text may span many lines and
hold blank lines, as code does). Texts are tokenised one at a time (no tokenizer
padding settings are involved), truncated to ``max_tokens``, sorted by length
so a batch holds texts of similar length, and padded on the right, so every
real token sits at the position it would have alone and, under causal
attention, never sees a padding token.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from toolkit.data import data_path
from toolkit.errors import EmptyInputError, TokenizerMissingError

#: The default texts (prose, code, math, dialogue, several languages).
DEFAULT_PROMPTS = data_path("prompts.txt")
SEPARATOR = "---"


def load_prompts(path: str | os.PathLike | None = None) -> list[str]:
    """Read texts separated by ``---`` lines.

    Parameters
    ----------
    path : str or path-like, optional
        Default :data:`DEFAULT_PROMPTS` (``data/prompts.txt``, installed with the package).

    Returns
    -------
    list of str
        The texts, stripped, empty ones dropped.

    Raises
    ------
    EmptyInputError
        The file holds no text.
    FileNotFoundError
        No such file.
    """
    path = Path(path) if path is not None else DEFAULT_PROMPTS
    blocks, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() == SEPARATOR:
            blocks.append("\n".join(current))
            current = []
        else:
            current.append(line)
    blocks.append("\n".join(current))
    texts = [b.strip() for b in blocks if b.strip()]
    if not texts:
        raise EmptyInputError(f"{path} holds no text (texts are separated by lines holding only '---')")
    return texts


def as_texts(texts) -> list:
    """``None`` -> default prompts; a path -> its prompts; a str -> ``[str]``; else a list."""
    if texts is None:
        return load_prompts()
    if isinstance(texts, os.PathLike):
        return load_prompts(texts)
    if isinstance(texts, str):
        texts = [texts]
    texts = list(texts)
    if not texts:
        raise EmptyInputError("no texts given")
    return texts


def tokenize(texts: list, tokenizer, *, max_tokens: int, source: str = "") -> list[list[int]]:
    """Token ids of each text (str through ``tokenizer``; lists of int as they are), truncated.

    Raises
    ------
    TokenizerMissingError
        A str text and no tokenizer.
    EmptyInputError
        A text with fewer than 2 tokens (no next token to predict, no
        attention pattern to speak of); the message names it.
    """
    out = []
    for i, t in enumerate(texts):
        if isinstance(t, str):
            if tokenizer is None:
                raise TokenizerMissingError(source, "texts are strings")
            ids = list(tokenizer(t, add_special_tokens=True, truncation=True, max_length=max_tokens)["input_ids"])
        else:
            ids = [int(x) for x in (t.tolist() if torch.is_tensor(t) else t)]
        ids = ids[:max_tokens]
        if len(ids) < 2:
            raise EmptyInputError(f"text {i} ({str(t)[:40]!r}) has {len(ids)} token(s); each text needs at least 2")
        out.append(ids)
    return out


@dataclass
class PaddedBatch:
    """One batch: ``input_ids``/``attention_mask`` (batch, seq), lengths, text positions."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    lengths: list[int]
    text_index: list[int]


def batches(ids: list[list[int]], *, batch_size: int, pad_id: int = 0) -> list[PaddedBatch]:
    """Right-padded batches of texts of similar length, longest first.

    Parameters
    ----------
    ids : list of list of int
    batch_size : int
        Texts per batch (at least 1).
    pad_id : int
        Id written at padding positions (never read: masked and excluded).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    order = sorted(range(len(ids)), key=lambda i: (-len(ids[i]), i))
    out = []
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        lengths = [len(ids[i]) for i in chunk]
        width = max(lengths)
        input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, i in enumerate(chunk):
            input_ids[row, : lengths[row]] = torch.tensor(ids[i], dtype=torch.long)
            mask[row, : lengths[row]] = 1
        out.append(PaddedBatch(input_ids, mask, lengths, chunk))
    return out
