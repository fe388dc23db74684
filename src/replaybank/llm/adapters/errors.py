"""The adapter library's errors: each names the adapter and the field that was wrong.

Example:
    >>> str(ManifestError("lib/tools/replaybank.json: unknown key", adapter="tools", field="colour"))
    "adapter 'tools', field 'colour': lib/tools/replaybank.json: unknown key"
"""

from __future__ import annotations

from replaybank.errors import ReplayBankError

__all__ = [
    "AdapterExistsError", "AdapterNotFoundError", "EmptyLibraryError", "FingerprintError", "GateError",
    "HashMismatchError", "LibraryError", "LibraryRepairWarning", "ManifestError", "MergeError", "SignatureError",
]


class LibraryError(ReplayBankError):
    """A problem with an adapter library or one of its adapters.

    Attributes:
        adapter: the adapter's name (None: the library as a whole).
        field: the manifest field (or argument) at fault, dotted (``figures.retention``); None if none.
    """

    def __init__(self, message: str, *, adapter: str | None = None, field: str | None = None) -> None:
        self.adapter, self.field = adapter, field
        where = ", ".join(p for p in (
            f"adapter {adapter!r}" if adapter is not None else "", f"field {field!r}" if field is not None else "") if p)
        super().__init__(f"{where}: {message}" if where else message)


class ManifestError(LibraryError):
    """A manifest (``replaybank.json``, ``adapter_config.json``, ``index.json``) fails its schema."""


class FingerprintError(LibraryError):
    """The adapter was trained on another base model than the one it is loaded onto."""


class HashMismatchError(LibraryError):
    """The weights' or the adapter config's SHA-256 is not the one the manifest recorded."""


class SignatureError(HashMismatchError):
    """The library has a key and the manifest's HMAC signature is missing or not that key's: the
    entry was registered without the key, or edited (and re-hashed) since."""


class GateError(LibraryError):
    """The adapter's measured retention is below the floor (and registration was not forced)."""


class MergeError(LibraryError):
    """Adapters that cannot be merged with the combination type asked for."""


class EmptyLibraryError(LibraryError):
    """Routing (or merging) asked of a library with no adapter to choose from."""


class AdapterExistsError(LibraryError):
    """Registration under a name the library already holds."""


class AdapterNotFoundError(LibraryError):
    """A name the library does not hold."""


class LibraryRepairWarning(UserWarning):
    """The library found a folder left by a registration killed between its two steps and
    re-indexed it (its files checked) or moved it aside to ``.orphaned/``."""
