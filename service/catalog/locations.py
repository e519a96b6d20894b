"""Where the catalog front lets a table live, and which files are a table's own
(docs/catalogs.md, "Where tables live").

    canonical("file:/data/wh/db/t/")         # "file:///data/wh/db/t"
    inside("s3a://b/wh/db/t/x", "s3://b/wh/db/t")   # True: the same storage, under it
    place(warehouse, ("db",), "s3://b/wh/db/custom")   # the location, or InvalidRequest

A location is compared in one written form: the scheme in lower case (and its aliases, s3a and
s3n for s3, gs for gcs, the secure variants of Azure's), `file:` paths with an empty authority,
no trailing slash. What cannot be put in that form unambiguously (`.` or `..` segments, empty
segments, percent-escapes, backslashes, queries, control characters) is refused rather than
guessed at: storage layers decode such paths differently, and the check must name the folder
the storage will use.

On `file:` storage the comparison also follows symbolic links, which a lexical check cannot
see: a table's location may not go through one below the warehouse (`place`), and a path is
inside a folder only when its real path is inside the folder's real path too (`inside`), so a
link cannot make one table's folder, or a file it lists, another table's.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping

from pyiceberg.typedef import Identifier

from service.wire.errors import InvalidRequest

__all__ = [
    "PATH_PROPERTIES",
    "canonical",
    "check_paths",
    "default_location",
    "fresh_location",
    "inside",
    "local_path",
    "location_of_metadata",
    "metadata_file",
    "overlap",
    "place",
    "through_link",
]

# table properties that name where a table's files are written: each must lie in the table
PATH_PROPERTIES = (
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)
_ALIASES = {"s3a": "s3", "s3n": "s3", "gs": "gcs", "abfss": "abfs", "wasbs": "wasb"}
_UNSAFE = re.compile(r"[%\\?#\x00-\x1f\x7f]")


class _Unsafe(ValueError):
    """A location that has no single reading."""


def canonical(uri: str) -> str:
    """`uri` in the one form locations are compared and stored in.

    Raises:
        ValueError: `uri` has no scheme, or a part that storage layers read differently.
    """
    found = _SCHEME.match(uri)
    if found is None:
        raise _Unsafe("a URI with a scheme (s3://bucket/..., file:///...)")
    scheme, rest = found.group(1).lower(), found.group(2)
    if scheme == "file":
        if rest.startswith("//localhost/"):
            rest = rest.removeprefix("//localhost")
        elif rest.startswith("///"):
            rest = rest[2:]
        elif rest.startswith("//"):
            raise _Unsafe("file: URIs name a local path: file:///abs/path")
        authority, path = "", rest
    else:
        if not rest.startswith("//"):
            raise _Unsafe(f"{scheme}://authority/path")
        authority, _, path = rest[2:].partition("/")
        path = "/" + path
        if not authority or _UNSAFE.search(authority) or "@" in authority:
            raise _Unsafe("a plain authority (a bucket or host name)")
    path = path.rstrip("/")
    for segment in path.split("/")[1:]:
        if segment in ("", ".", "..") or _UNSAFE.search(segment) or not segment.isprintable():
            raise _Unsafe(
                "path segments that are not empty, . or .., without %-escapes, backslashes, ? or #"
            )
    return f"{scheme}://{authority}{path}"


def _key(uri: str) -> str:
    scheme, _, rest = canonical(uri).partition("://")
    return f"{_ALIASES.get(scheme, scheme)}://{rest}"


def local_path(uri: str) -> str | None:
    """The local path a `file:` URI names (None for other storage, or a URI without a single
    reading)."""
    try:
        key = _key(uri)
    except ValueError:
        return None
    return key.removeprefix("file://") if key.startswith("file:///") else None


def _within(path: str, folder: str) -> bool:
    return os.path.commonpath((path, folder)) == folder


def through_link(uri: str, base: str) -> bool:
    """Whether the `file:` location `uri` goes through a symbolic link below `base` (a folder
    it lies in; the warehouse): its real path is not the real path of `base` followed by the
    rest of `uri` as written. Links above `base` (a warehouse reached through one) count for
    nothing. A `uri` not below `base` counts every link of its path. False for other storage,
    which has no links. Parts that do not exist yet resolve to themselves."""
    path, root = local_path(uri), local_path(base)
    if path is None:
        return False
    if root is None or not _within(path, root):
        root = "/"
    rest = os.path.relpath(path, root)
    expected = os.path.normpath(os.path.join(os.path.realpath(root), rest))
    return os.path.realpath(path) != expected


def inside(uri: str, folder: str) -> bool:
    """Whether `uri` is `folder` or lies under it, in the same storage (exactly: a purge
    deletes only what this says is inside). On `file:` storage its real path must also lie in
    the folder's real path, so a symbolic link (to another table's folder, out of the
    warehouse) does not bring a file in. False for a `uri` without a single reading."""
    try:
        key, root = _key(uri), _key(folder)
    except ValueError:
        return False
    if not (key == root or key.startswith(root + "/")):
        return False
    path, folder_path = local_path(key), local_path(root)
    if path is None or folder_path is None:
        return True
    return _within(os.path.realpath(path), os.path.realpath(folder_path))


def overlap(a: str, b: str) -> bool:
    """Whether two table locations share files: equal, or one inside the other. Compared
    without regard to case, so a case-insensitive file system is covered too."""
    ka, kb = _loose_key(a), _loose_key(b)
    return ka == kb or ka.startswith(kb + "/") or kb.startswith(ka + "/")


def _loose_key(uri: str) -> str:
    # a location stored by another catalog may have no single reading: compared as written
    try:
        return _key(uri).casefold()
    except ValueError:
        return uri.rstrip("/").casefold()


def default_location(warehouse: str, namespace: Identifier, name: str) -> str:
    """`<warehouse>/<namespace levels>/<table>`: Iceberg's JdbcCatalog's default."""
    return canonical(f"{warehouse}/{'/'.join(namespace)}/{name}")


def fresh_location(warehouse: str, namespace: Identifier, name: str) -> str:
    """A default for a table whose default folder another table holds (one renamed from this
    name keeps its folder): the same folder name with a random suffix."""
    return default_location(warehouse, namespace, f"{name}-{uuid.uuid4().hex[:12]}")


def place(warehouse: str, namespace: Identifier, location: str) -> str:
    """`location` as the table's, in canonical form, if it lies in its namespace's folder of
    the warehouse (`<warehouse>/<namespace>/...`, not the folder itself).

    Raises:
        InvalidRequest: it does not; the message says what is allowed.
    """
    folder = default_location(warehouse, namespace, "").rstrip("/")
    allowed = (
        f"a table's location is {folder}/<table> (the default: send no location) or another "
        f"folder under {folder}/ that no other table's location is, contains or lies in"
    )
    try:
        placed = canonical(location)
    except _Unsafe as exc:
        raise InvalidRequest(f"location {location[:300]!r}: write {exc}; {allowed}") from None
    key, root = _key(placed), _key(folder)
    if not key.startswith(root + "/"):
        raise InvalidRequest(f"location {location[:300]!r} is outside the warehouse: {allowed}")
    if through_link(placed, warehouse):
        # its files would be another folder's (another table's, or outside the warehouse)
        raise InvalidRequest(
            f"location {location[:300]!r} goes through a symbolic link in the warehouse, so "
            f"its files would lie elsewhere: {allowed}, with no link on the way"
        )
    return placed


def check_paths(properties: Mapping[str, str], location: str) -> None:
    """The write-path properties lie in the table's own location.

    Raises:
        InvalidRequest: one points elsewhere, or has no single reading.
    """
    for key in PATH_PROPERTIES:
        value = properties.get(key)
        if value is not None and not inside(value, location):
            raise InvalidRequest(
                f"table property {key} = {value[:300]!r}: it must be the table's location "
                f"{location} or a folder under it (or unset); the catalog writes a table's "
                "files only in its own location"
            )


def metadata_file(location: str, version: int) -> str:
    """Where the catalog writes a table's metadata file of `version`: always
    `<location>/metadata/`, whatever the table's properties say, so that a table's location is
    known from its pointer alone (`location_of_metadata`)."""
    return f"{location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"


def location_of_metadata(metadata_location: str) -> str:
    """A table's location as its pointer shows it: the folder holding its `metadata/` folder
    (where `metadata_file` writes); for a metadata file elsewhere (written by another catalog),
    the file's own folder, the nearest the pointer tells."""
    folder = metadata_location.rsplit("/", 1)[0]
    head, _, last = folder.rpartition("/")
    return head if last == "metadata" and head else folder
