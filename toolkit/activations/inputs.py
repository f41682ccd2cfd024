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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from toolkit.data import data_path
from toolkit.errors import EmptyInputError, TextInputError, TokenizerMissingError
from toolkit.options import read_text_file

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
    TextFileNotFoundError
        No such file, or a folder (a ``FileNotFoundError`` too).
    TextInputError
        The file is not UTF-8 (the message says where and how to convert it).
    """
    path = Path(path) if path is not None else DEFAULT_PROMPTS
    blocks, current = [], []
    body = read_text_file(path, "prompts file", "or read it with its own encoding and pass the texts as a list of str")
    for line in body.splitlines():
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


_BYTES = (bytes, bytearray, memoryview)
_HOW_TEXTS = ("pass a str, a list of str, token ids as a list of lists of int, or a pathlib.Path of a file "
              "of texts separated by '---' lines")


def _preview(t) -> str:
    text = repr(t)
    return text if len(text) <= 40 else text[:37] + "..."


def _token_ids(t, i: int) -> list[int]:
    """The token ids of text ``i`` (a sequence or 1-D tensor/array of whole numbers), checked."""
    import numbers

    if torch.is_tensor(t) or type(t).__module__ == "numpy":
        if t.ndim != 1:
            raise TextInputError(f"text {i}", f"is an array of shape {tuple(t.shape)}; token ids of one text are "
                                 "1-D (pass a 2-D array as the texts, one row per text)")
        if torch.is_tensor(t):
            integer = not (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool)
        else:
            integer = t.dtype.kind in "iu"
        if not integer:
            raise TextInputError(f"text {i}", f"holds {t.dtype} values; token ids are whole numbers (an int dtype)")
        return [int(x) for x in t.tolist()]
    ids = []
    for j, x in enumerate(t):
        if not isinstance(x, numbers.Integral) or isinstance(x, bool) or type(x).__name__ == "bool_":
            if torch.is_tensor(x) and x.ndim == 0 and not x.dtype.is_floating_point and x.dtype != torch.bool:
                x = int(x)
            else:
                raise TextInputError(f"text {i}", f"holds {_preview(x)} at position {j}, which is not a token id "
                                     "(a whole number, an int); token ids are lists of int")
        ids.append(int(x))
    return ids


def as_texts(texts) -> list:
    """``None`` -> default prompts; a path -> its prompts; a str -> ``[str]``; else a list.

    Each text is a str or a sequence of token ids (ints), all of one kind.

    Raises
    ------
    TextInputError
        ``texts`` (or one of them) is bytes (the message says how to decode
        them), neither str nor token ids, a str holding a lone surrogate (not
        encodable as UTF-8), or the texts mix strings and token ids.
    EmptyInputError
        No texts.
    """
    if texts is None:
        return load_prompts()
    if isinstance(texts, os.PathLike):
        return load_prompts(texts)
    if isinstance(texts, str):
        texts = [texts]
    elif isinstance(texts, _BYTES):
        raise TextInputError("texts", f"is bytes ({_preview(bytes(texts[:30]))}), not text: decode them first, "
                             "e.g. texts=data.decode('utf-8') (token ids go as a list of int, not bytes)")
    elif isinstance(texts, (dict, set, frozenset)) or not isinstance(texts, Iterable):
        raise TextInputError("texts", f"is of type {type(texts).__name__} ({_preview(texts)}); {_HOW_TEXTS}")
    elif torch.is_tensor(texts) or type(texts).__module__ == "numpy":
        if texts.ndim not in (1, 2):
            raise TextInputError("texts", f"is an array of shape {tuple(texts.shape)}; token ids go as a 1-D "
                                 "array (one text) or a 2-D one (one row per text)")
        texts = [texts] if texts.ndim == 1 else list(texts)  # one text of token ids, or one per row
    texts = list(texts)
    if not texts:
        raise EmptyInputError("no texts given")
    out, kinds = [], {}
    for i, t in enumerate(texts):
        if isinstance(t, str):
            try:
                t.encode("utf-8")
            except UnicodeEncodeError as e:
                raise TextInputError(
                    f"text {i} ({_preview(t)})",
                    f"holds a lone surrogate {t[e.start]!r} at character {e.start}, which is not a Unicode "
                    "character (text decoded with errors='surrogateescape' gives these): decode the bytes with "
                    "errors='replace', or remove it, e.g. t.encode('utf-8', 'replace').decode('utf-8')",
                ) from None
            kinds.setdefault("str", i)
            out.append(t)
        elif isinstance(t, _BYTES):
            raise TextInputError(f"text {i} ({_preview(bytes(t[:30]))})", "is bytes, not str: decode it first, e.g. "
                                 "[t.decode('utf-8') for t in texts]")
        elif isinstance(t, (dict, set, frozenset)) or not (isinstance(t, Iterable) or torch.is_tensor(t)):
            raise TextInputError(f"text {i} ({_preview(t)})", f"is of type {type(t).__name__}; {_HOW_TEXTS}")
        else:
            kinds.setdefault("ids", i)
            out.append(_token_ids(t, i))
    if len(kinds) > 1:
        raise TextInputError("texts", f"mix strings (text {kinds['str']}) and token ids (text {kinds['ids']}): "
                             "pass all texts as str (tokenised here), or all as lists of int")
    return out


def texts_option(value, where: str):
    """``texts`` at a front door, before the model is opened: what :func:`as_texts` takes (None and a path are
    read later), with no empty text; returned as given.

    Raises
    ------
    InvalidOptionError
        Naming the function, ``texts`` and what :func:`as_texts` found (no texts, a text of another type, an
        empty str, a lone surrogate...).
    """
    from toolkit.errors import InvalidOptionError

    if value is None or isinstance(value, os.PathLike):
        return value
    try:
        texts = as_texts(value)
    except (TextInputError, EmptyInputError) as e:
        raise InvalidOptionError("texts", value, f"a str, a list of str, token ids or a prompts file ({e})",
                                 where) from None
    empty = next((i for i, t in enumerate(texts) if isinstance(t, str) and not t), None)
    if empty is not None:
        raise InvalidOptionError("texts", value, f"texts that are not empty (text {empty} is '')", where)
    return value


def check_token_ids(ids: list[list[int]], vocab_size: int, *, tokenized: bool) -> None:
    """Every token id lies in ``[0, vocab_size)``, the rows of the model's input embedding.

    Raises
    ------
    TextInputError
        Names the text, the position and the id; says whether the tokenizer
        (``tokenized``) or the caller gave it.
    """
    for i, row in enumerate(ids):
        bad = next((j for j, x in enumerate(row) if not 0 <= x < vocab_size), None)
        if bad is not None:
            origin = ("the tokenizer gave it: a tokenizer of another model? pass the model's own tokenizer="
                      if tokenized else "ids run from 0 to the vocabulary size - 1")
            raise TextInputError(f"text {i}", f"holds token id {row[bad]} at position {bad}, outside the model's "
                                 f"vocabulary (ids 0 to {vocab_size - 1}; {origin})")


def tokenize(texts: list, tokenizer, *, max_tokens: int, source: str = "") -> list[list[int]]:
    """Token ids of each text (str through ``tokenizer``; lists of int, as :func:`as_texts` gives them, as
    they are), truncated.

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
            ids = list(t)
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
