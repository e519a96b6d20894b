"""What a client's Avro file (a manifest list, a manifest) holds, counted before it is parsed:
its entries and the bytes its blocks inflate to, each bounded (docs/catalog-front.md §5).

    scanned = scan(data, what="manifest s3://b/wh/db/t/metadata/m0.avro", limits=limits)
    scanned.entries, scanned.inflated

pyiceberg's reader turns every entry of a file into objects (about 2.4 KB each), after
inflating each block whole: a manifest of a few hundred kilobytes that deflates to millions of
entries, or one block that inflates to gigabytes, would take the service's memory. The scan
walks the container (Avro's object container: magic, metadata, sync marker, then blocks of a
record count, a size, the bytes and the marker) and inflates each block with a bound, so what
a file may cost is known before pyiceberg reads it. Codecs: `null` and `deflate` (what Iceberg
writes by default), `bzip2`; others are refused, as is anything that is no Avro container, or
whose writer schema nests deeper than `MAX_DEPTH`.
"""

from __future__ import annotations

import bz2
import zlib
from dataclasses import dataclass

from service.wire.errors import InvalidRequest

__all__ = ["Scanned", "scan"]

MAGIC = b"Obj\x01"
SYNC_SIZE = 16
# how deep a writer schema may nest: Iceberg's manifest schemas nest under 20 levels (a
# partition struct of nested fields), a hostile one could nest until the parser recurses out
MAX_DEPTH = 64


@dataclass(frozen=True)
class Scanned:
    entries: int
    inflated: int


class _Malformed(ValueError):
    pass


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise _Malformed("it ends early")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def long(self) -> int:
        """An Avro long: zig-zag, variable length (at most 10 bytes)."""
        shift, value = 0, 0
        for _ in range(10):
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
        raise _Malformed("a number runs past 10 bytes")

    def done(self) -> bool:
        return self.at >= len(self.data)


def scan(data: bytes, *, what: str, max_entries: int, max_inflated: int) -> Scanned:
    """Count the entries of the Avro container `data` and the bytes its blocks inflate to.

    Raises:
        InvalidRequest: it holds more than `max_entries` entries or inflates past
            `max_inflated` bytes (naming the setting), is no Avro container, or uses a codec
            the service does not read.
    """
    try:
        return _scan(_Bytes(data), what, max_entries, max_inflated)
    except _Malformed as exc:
        raise InvalidRequest(
            f"{what} is not an Avro file Iceberg writes: {exc}; commit the files Iceberg wrote"
        ) from exc


def _scan(data: _Bytes, what: str, max_entries: int, max_inflated: int) -> Scanned:
    if data.take(4) != MAGIC:
        raise _Malformed("no Avro magic")
    header = _metadata(data)
    _check_depth(header.get("avro.schema", b""))
    codec = header.get("avro.codec", b"null").decode("utf-8", "replace")
    if codec not in ("null", "deflate", "bzip2"):
        raise InvalidRequest(
            f"{what} is compressed with {codec[:40]!r}; the catalog reads manifests written "
            "with deflate (Iceberg's default), bzip2 or none: set write.avro.compression-codec "
            "to gzip"
        )
    sync = data.take(SYNC_SIZE)
    entries = inflated = 0
    while not data.done():
        count, size = data.long(), data.long()
        if count < 0 or size < 0:
            raise _Malformed("a block of negative size")
        entries += count
        if entries > max_entries:
            raise InvalidRequest(
                f"{what} holds more than {max_entries} entries "
                "(LAKELOCK_CATALOG_MAX_MANIFEST_ENTRIES); split it"
            )
        inflated += _inflated(data.take(size), codec, max_inflated - inflated)
        if inflated > max_inflated:
            raise InvalidRequest(
                f"{what} inflates to more than {max_inflated} bytes "
                "(LAKELOCK_CATALOG_MAX_MANIFEST_BYTES); split it"
            )
        if data.take(SYNC_SIZE) != sync:
            raise _Malformed("a block's sync marker is not the file's")
    return Scanned(entries, inflated)


def _metadata(data: _Bytes) -> dict[str, bytes]:
    """The header's metadata: an Avro map of bytes, in blocks (a negative count is followed
    by the block's size)."""
    found: dict[str, bytes] = {}
    while True:
        count = data.long()
        if count == 0:
            return found
        if count < 0:
            count = -count
            data.long()
        if count > 1000 or len(found) + count > 1000:
            raise _Malformed("its header holds more than 1000 keys")
        for _ in range(count):
            key = data.take(data.long()).decode("utf-8", "replace")
            found[key] = data.take(data.long())


def _check_depth(schema: bytes) -> None:
    """Refuse a writer schema nested deeper than `MAX_DEPTH` (JSON objects and arrays): pyiceberg
    parses it recursively, and a schema of any real manifest is a few levels deep."""
    depth, quoted, escaped = 0, False, False
    for byte in schema:
        if quoted:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                quoted = False
        elif byte == 0x22:
            quoted = True
        elif byte in (0x7B, 0x5B):  # { [
            depth += 1
            if depth > MAX_DEPTH:
                raise _Malformed(f"its schema is nested more than {MAX_DEPTH} levels deep")
        elif byte in (0x7D, 0x5D):  # } ]
            depth -= 1


def _inflated(block: bytes, codec: str, room: int) -> int:
    """The size `block` inflates to, or `room` + 1 once it passes `room`."""
    if codec == "null":
        return len(block)
    most = max(room, 0) + 1
    try:
        if codec == "deflate":
            inflater = zlib.decompressobj(-15)
            return len(inflater.decompress(block, most))
        return len(bz2.BZ2Decompressor().decompress(block, most))
    except (zlib.error, OSError, EOFError) as exc:
        raise _Malformed(f"a block does not inflate ({exc})") from exc
