"""Avro containers made by hand, for the tests and benchmarks of what the catalog front reads:
a file of blocks of any codec, and a manifest bomb (one real manifest's entries repeated many
times in one deflated block: a small file of many entries).

    data = container(b"deflate", [(1000, deflated(b"\\x02" * 1000))])
    exploded = bomb(manifest_bytes, 300_000)
"""

from __future__ import annotations

import zlib

from service.catalog.avro import MAGIC, SYNC_SIZE, _Bytes, _metadata

__all__ = ["avro_long", "bomb", "container", "deflated", "nested", "split"]


def avro_long(value: int) -> bytes:
    """An Avro long: zig-zag, variable length."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def split(data: bytes) -> tuple[bytes, dict[str, bytes], bytes, list[tuple[int, bytes]]]:
    """An Avro container's header (up to its sync marker), metadata, sync marker, and its
    blocks as (count, inflated bytes)."""
    reader = _Bytes(data)
    reader.take(len(MAGIC))
    meta = _metadata(reader)
    sync = reader.take(SYNC_SIZE)
    header = data[: reader.at]
    blocks = []
    while not reader.done():
        count, size = reader.long(), reader.long()
        raw = reader.take(size)
        if meta.get("avro.codec", b"null") == b"deflate":
            raw = zlib.decompress(raw, -15)
        blocks.append((count, raw))
        reader.take(SYNC_SIZE)
    return header, meta, sync, blocks


def deflated(block: bytes) -> bytes:
    return zlib.compress(block)[2:-1]


def bomb(manifest: bytes, times: int) -> bytes:
    """`manifest` (deflate) with its one block's entries repeated `times` times, deflated
    again: a small file of many entries."""
    header, meta, sync, blocks = split(manifest)
    assert meta["avro.codec"] == b"deflate" and len(blocks) == 1
    count, raw = blocks[0]
    packed = deflated(raw * times)
    return header + avro_long(count * times) + avro_long(len(packed)) + packed + sync


def container(codec: bytes, blocks: list[tuple[int, bytes]], schema: bytes = b'"long"') -> bytes:
    meta = {b"avro.codec": codec, b"avro.schema": schema}
    head = MAGIC + avro_long(len(meta))
    for key, value in meta.items():
        head += avro_long(len(key)) + key + avro_long(len(value)) + value
    sync = b"S" * SYNC_SIZE
    body = b"".join(avro_long(n) + avro_long(len(b)) + b + sync for n, b in blocks)
    return head + avro_long(0) + sync + body


def nested(manifest: bytes, depth: int) -> bytes:
    """`manifest` with its writer schema replaced by one nested `depth` levels deep: the same
    entries, a header a recursive parser cannot get through."""
    _, meta, _, blocks = split(manifest)
    schema = b'{"type":' * depth + b'"long"' + b"}" * depth
    codec = meta.get("avro.codec", b"null")
    packed = [(n, deflated(raw) if codec == b"deflate" else raw) for n, raw in blocks]
    return container(codec, packed, schema=schema)
