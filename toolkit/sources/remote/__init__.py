"""Checkpoints read in place over HTTP: a hub repo not in the local cache, or plain URLs.

Only the bytes a pass needs move: a sharded index, each shard's header (two
small range requests), then each selected tensor's byte range, streamed into
the same pipeline as a local file's. Dask workers re-open the checkpoint
from the same repo and commit (or URL) and read their own ranges.

===============  ======================================================================
module           job
===============  ======================================================================
``transport``    the one place every request goes through: redirects, time, size, typed errors
``http``         :class:`RemoteFile`: checked range reads (retries, resume, versions)
``probe``        HEADs and JSON answers (the hub listing), with the retries of a read
``verify``       what is checked of the bytes themselves (a whole file against the hub's hash)
``folders``      where the files lie: a hub repo at a commit, or a folder of URLs
``checked``      what the sources read in place share (their files, their check)
``safetensors``  the safetensors reader over range requests
``gguf``         the GGUF reader over range requests (layouts the toolkit plans itself)
``torch_bin``    the ``.bin`` reader: the zip directory and the pickle, then each tensor's range
``open``         choosing the weight files and opening them
===============  ======================================================================
"""

from toolkit.sources.remote.folders import RemoteFolder, hub_folder, is_url, url_folder
from toolkit.sources.remote.http import RemoteFile, transfer_stats
from toolkit.sources.remote.open import READ_IN_PLACE, open_remote, open_url, reads_in_place, weight_target

__all__ = ["READ_IN_PLACE", "RemoteFile", "RemoteFolder", "hub_folder", "is_url", "open_remote", "open_url",
           "reads_in_place", "transfer_stats", "url_folder", "weight_target"]
