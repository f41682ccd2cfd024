"""What every source read in place shares: its files are URLs, checked by what the responses showed."""

from __future__ import annotations

from toolkit.errors import CheckpointChangedError
from toolkit.sources.remote.http import RemoteFile, changed_since_opened


class RemoteFiles:
    """Mixin of a :class:`~toolkit.sources.Source` whose weight files are :class:`RemoteFile` objects.

    The class sets ``_remote`` (the URL as shown, :attr:`RemoteFile.shown` -> :class:`RemoteFile`),
    ``location`` (the hub id or the URL as shown: its secrets masked), ``_given`` (the hub id or URL as
    given, secrets included) and ``fingerprint``.
    """

    _remote: dict[str, RemoteFile]
    _given: str

    def reopen_location(self) -> str:
        """The hub id or URL as given (a signed URL's query, its userinfo): what a Dask worker opens again.
        Never shown or stored (:attr:`location` is)."""
        return self._given

    def files(self) -> list[str]:
        """The weight files' URLs, as shown (secrets masked)."""
        return list(self._remote)

    def check_unchanged(self) -> None:
        """Raise when a response seen since the files were opened showed another version of one.

        Every range response is checked as it arrives (size, ``ETag``,
        ``X-Repo-Commit``, ``X-Linked-Etag``: :mod:`toolkit.sources.remote.http`)
        and raises there; this also refuses a result whose own reads passed
        while another read of the same files saw them change.

        Raises
        ------
        CheckpointChangedError
            A file of this source was seen in another version.
        """
        seen = changed_since_opened(self._remote.values())
        if seen:
            raise CheckpointChangedError(self.location, self.fingerprint, seen)
