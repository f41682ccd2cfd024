"""GGUF files, named and valued as ``transformers`` loads them.

============================  ===============================================================
module                        job
============================  ===============================================================
:mod:`.table`                 the header (metadata and tensor table), read without tensor data
:mod:`.own_plan`              the common layouts (llama, qwen2, qwen3) without ``transformers``
:mod:`.transformers_plan`     every other layout, by running ``transformers``' own GGUF loading
:mod:`.sizes`                 the declared sizes checked against the table, before anything is built
:mod:`.decoding`              ``gguf.dequantize`` and the typed errors of library code run on a file
:mod:`.source`                :class:`GGUFSource`: one record per parameter; :class:`GGUFFormat`, its registry entry
============================  ===============================================================
"""

from toolkit.sources.gguf.source import GGUFFormat, GGUFSource
from toolkit.sources.gguf.transformers_plan import gguf_config

__all__ = ["GGUFFormat", "GGUFSource", "gguf_config"]
