"""Fused tensors: how the output rows of one stored matrix are cut into components.

:class:`Split` is declared by family adapters (:mod:`toolkit.architectures.adapter`)
and by user mappings (:mod:`toolkit.architectures.mapping`), its sizes taken
from the config, never guessed from shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from toolkit.architectures.base import Dims
from toolkit.architectures.vocabulary import ALL_COMPONENTS
from toolkit.errors import MappingError


@dataclass(frozen=True)
class Split:
    """How the output rows of a fused tensor are cut into components.

    The (out, in) matrix holds ``groups`` repeats of a block made of
    ``sizes[0]`` rows of ``components[0]``, then ``sizes[1]`` rows of
    ``components[1]``... With ``groups=1`` the components are contiguous
    (phi3 ``qkv_proj``: all of q, then k, then v); with ``groups=num_heads``
    they interleave per head (gpt_neox ``query_key_value``:
    ``[h0_q, h0_k, h0_v, h1_q, ...]``).

    Parameters
    ----------
    components : tuple of str
        Canonical components in storage order.
    sizes : sequence of int, or callable ``Dims -> sequence of int``
        Rows of each component within one group, from the config.
    groups : int, or callable ``Dims -> int``
        Number of repeats (default 1).
    """

    components: tuple[str, ...]
    sizes: Sequence[int] | Callable[[Dims], Sequence[int]]
    groups: int | Callable[[Dims], int] = 1

    def sizes_of(self, dims: Dims, key: str = "") -> tuple[list[int], int]:
        """``(sizes, groups)`` for these dims, checked (integer arithmetic only, nothing allocated).

        Raises
        ------
        MappingError
            The config lacks a size the split needs, or a size is not a positive integer.
        """
        try:
            sizes = list(self.sizes(dims) if callable(self.sizes) else self.sizes)
            groups = self.groups(dims) if callable(self.groups) else self.groups
        except TypeError as e:  # a None size: the config lacks it
            raise MappingError(key, f"the config lacks a size this split needs ({dims}): {e}") from e
        except ArithmeticError as e:  # a zero head count (Dims refuses it; a hand-made Dims may not)
            raise MappingError(key, f"the config's sizes cannot give this split ({dims}): {e}") from e
        whole = [*sizes, groups]
        if None in whole:
            raise MappingError(key, f"the config lacks a size this split needs ({dims}): sizes {sizes} x {groups}")
        if len(sizes) != len(self.components) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in whole):
            raise MappingError(key, f"bad split sizes {sizes} x {groups} groups for {self.components}: the config's "
                               "sizes must be positive integers")
        return sizes, groups

    def rows(self, dims: Dims, key: str = "") -> int:
        """The fused tensor's output rows the config declares, ``groups x sum(sizes)`` (nothing allocated).

        Raises
        ------
        MappingError
            As :meth:`sizes_of`.
        """
        sizes, groups = self.sizes_of(dims, key)
        return sum(sizes) * groups

    def indices(self, dims: Dims, key: str = "") -> tuple[int, dict[str, object]]:
        """``(total_rows, {component: slice or LongTensor})`` for these sizes.

        A grouped split allocates an index of ``total_rows`` entries: check the
        stored tensor's rows against :meth:`rows` first (a declared head size
        of 2^24 must not become a 2^24-row index).

        Raises
        ------
        MappingError
            As :meth:`sizes_of`.
        """
        sizes, groups = self.sizes_of(dims, key)
        block = sum(sizes)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        if groups == 1:
            out = {c: slice(s, s + n) for c, s, n in zip(self.components, starts, sizes, strict=True)}
        else:
            base = torch.arange(groups).unsqueeze(1) * block
            out = {
                c: (base + torch.arange(s, s + n)).reshape(-1)
                for c, s, n in zip(self.components, starts, sizes, strict=True)
            }
        return block * groups, out


def check_component(comp: str, key: str) -> None:
    """Refuse a component name outside the canonical vocabulary.

    Parameters
    ----------
    comp : str
        The component (``"attn.q"``...).
    key : str
        What declared it (a module path, a regex), for the message.

    Raises
    ------
    MappingError
        ``comp`` is not one of :data:`~toolkit.architectures.ALL_COMPONENTS`.
    """
    if comp not in ALL_COMPONENTS:
        raise MappingError(key, f"unknown component {comp!r}; components are {', '.join(ALL_COMPONENTS)}")
