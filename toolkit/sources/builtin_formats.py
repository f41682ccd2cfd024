"""The toolkit's checkpoint formats, registered in the order they are tried on a folder.

Imported by :mod:`toolkit.sources`, so importing any module of the sources
registers them. A new built-in format is one module holding its
:class:`~toolkit.sources.formats.CheckpointFormat` and one line here.
"""

from toolkit.sources.formats import register_format
from toolkit.sources.gguf.source import GGUFFormat
from toolkit.sources.lora.source import AdapterFormat
from toolkit.sources.safetensors_ import SafetensorsFormat
from toolkit.sources.torch_bin import TorchBinFormat

# One registration per line, in the order the formats are tried on a folder (do not sort): a folder
# with full weights is read as those even when an adapter or a .gguf lies beside them.
register_format(SafetensorsFormat)
register_format(TorchBinFormat)
register_format(AdapterFormat)
register_format(GGUFFormat)
