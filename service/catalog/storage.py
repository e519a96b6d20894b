"""The catalog front's own access to the warehouse: local files or S3 (docs/catalogs.md, "Object
storage").

    storage = Storage("s3://lake/wh", S3Access(endpoint="http://127.0.0.1:9000", path_style=True))
    storage.check()                    # the warehouse answers: start-up
    storage.ready()                    # the same, shared by /readyz's probes
    storage.io                         # the FileIO of pyiceberg's reads and writes
    storage.reader(check)              # the FileIO of the files a commit names: bounded, cached
    storage.create(uri, data)          # a new file, never over another: one conditional PUT
    keys = storage.listing(folder)     # every object under a folder, markers included
    storage.delete(keys)               # in batches of 1,000 on S3

One FileIO for every scheme, pyiceberg's fsspec one (the library the service image carries, so
the tests run what the image runs): s3fs for `s3://`, `s3a://` and `s3n://` (one storage, as in
service.catalog.locations), fsspec's local file system for `file://`. S3 is reached with the
service's settings only (LAKELOCK_CATALOG_S3_ENDPOINT, _REGION, _PATH_STYLE) and the standard
AWS credential chain (environment, profile, web identity, the ECS task role): no key is a
setting, and nothing a client or a table property says reaches it (service.catalog.limits).

A storage fault (the endpoint down, access denied, a timeout) is a `StorageFault` naming the
URI: answered 503 with Retry-After, with nothing applied (every read and write of a call comes
before its swap of the pointer).

Manifest lists and manifests are never rewritten, so `reader` keeps the bytes it read (bounded),
and a commit tried again (a 409 then its retry, a parked commit) reads nothing twice. A client
that overwrites its own file between two commits gains nothing by it: it can as well overwrite
it after the commit, and the front judges a commit by what it read once.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile
from pyiceberg.io.fsspec import FsspecFileIO

from service.catalog import locations
from service.wire.errors import StorageFault

__all__ = ["CACHED_BYTES", "DELETE_BATCH", "S3_SCHEMES", "S3Access", "Storage", "TooLarge"]

log = logging.getLogger("lakelock.catalog")

S3_SCHEMES = ("s3", "s3a", "s3n")
SCHEMES = ("file", *S3_SCHEMES)
DELETE_BATCH = 1000  # keys in one S3 DeleteObjects, its limit
CACHED_BYTES = 64 * 1024 * 1024  # manifest lists and manifests kept, the latest used


@dataclass(frozen=True)
class Tries:
    """How hard one S3 request tries: botocore's attempts, and its timeouts to connect and to
    read an answer."""

    attempts: int
    connect_s: float
    read_s: float


WORK = Tries(attempts=3, connect_s=5.0, read_s=60.0)  # the catalog's reads and writes
# a readiness probe: one LIST, one attempt; a silent endpoint answered in about 4 s, within a
# load balancer's probe timeout (5 s on an ALB); the balancer's own count of failed probes is
# the retry
PROBE = Tries(attempts=1, connect_s=2.0, read_s=2.0)
READY_EVERY_S = 5.0  # how long a readiness check's answer stands
_PRECONDITION = ("PreconditionFailed", "412")  # a conditional write found an object there


class TooLarge(ValueError):
    """A file is larger than the reader's bound."""

    def __init__(self, uri: str, limit: int) -> None:
        super().__init__(f"{uri} has more than {limit} bytes")
        self.uri, self.limit = uri, limit


@dataclass(frozen=True)
class S3Access:
    """How the service reaches S3: the settings LAKELOCK_CATALOG_S3_*; keys from the AWS chain."""

    endpoint: str | None = None  # None: AWS's own for the region
    region: str | None = None  # None: the AWS chain's (AWS_REGION, the profile)
    path_style: bool = False  # bucket in the path, not the host name (S3-compatible stores)

    def filesystem(self, tries: Tries = WORK) -> Any:
        """The s3fs file system whose requests try as `tries` says (imported here: only an S3
        warehouse needs it).

        Raises:
            ModuleNotFoundError: s3fs is not installed; the message says which extra has it.
        """
        try:
            from s3fs import S3FileSystem
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                "an s3:// warehouse needs s3fs, which `lakelock[service]` installs: reinstall "
                "the service with that extra (the image has it)"
            ) from exc
        fs = S3FileSystem(
            client_kwargs={"endpoint_url": self.endpoint, "region_name": self.region},
            config_kwargs={
                "s3": {"addressing_style": "path" if self.path_style else "auto"},
                "connect_timeout": tries.connect_s,
                "read_timeout": tries.read_s,
                "retries": {"total_max_attempts": tries.attempts, "mode": "standard"},
            },
            use_listings_cache=False,  # a purge's listing must be the store's, not a memory
            skip_instance_cache=True,
        )
        fs.retries = 1  # s3fs's own tries come on top of botocore's: one is enough
        return fs


class _IO(FsspecFileIO):
    """pyiceberg's fsspec FileIO with the service's S3 file system for the S3 schemes, and
    local files; no other storage (a path of another scheme in a table's metadata is read
    with no one's credentials)."""

    def __init__(self, s3: Callable[[], Any]) -> None:
        super().__init__(properties={})
        self._scheme_to_fs = {"file": self._scheme_to_fs["file"]}
        for scheme in S3_SCHEMES:
            self._scheme_to_fs[scheme] = lambda _properties: s3()


class Storage:
    def __init__(self, warehouse: str, s3: S3Access | None = None) -> None:
        """Access to `warehouse` and the tables in it.

        Raises:
            ValueError: the warehouse's scheme has no file access here (the message names the
                schemes that have).
        """
        scheme = urlparse(warehouse).scheme.lower()
        if scheme not in SCHEMES:
            raise ValueError(
                f"the warehouse {warehouse} is on {scheme}://, which the catalog front cannot "
                f"reach: use one of {', '.join(s + '://' for s in SCHEMES)}"
            )
        self.warehouse = warehouse
        self.on_s3 = scheme in S3_SCHEMES
        self.s3 = s3 or S3Access()
        self._fs: dict[Tries, Any] = {}
        self._fs_lock = threading.Lock()
        self.io: FileIO = _IO(self._s3)
        self._checking = threading.Lock()
        self._checked_at = -READY_EVERY_S
        self._fault: str | None = None  # what the last check found wrong
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached = 0
        self._cache_lock = threading.Lock()

    def _s3(self, tries: Tries = WORK) -> Any:
        with self._fs_lock:
            if tries not in self._fs:
                self._fs[tries] = self.s3.filesystem(tries)
            return self._fs[tries]

    # -- faults ---------------------------------------------------------------------------

    @contextmanager
    def faults(self, uri: str, action: str) -> Iterator[None]:
        """Storage errors inside as `StorageFault` naming `uri` and `action` (what the service
        was doing). FileNotFoundError and FileExistsError pass: they are answers, not faults.

        Raises:
            StorageFault: as above.
        """
        try:
            yield
        except Exception as exc:
            if not _is_storage_error(exc) or _is_an_answer(exc):
                raise
            log.warning("storage fault: %s %s: %r", action, uri, exc)
            raise StorageFault(
                f"the warehouse's storage failed to {action} {uri[:300]}: {_said(exc)}; nothing "
                "was applied, try again"
            ) from exc

    def ready(self) -> None:
        """`check` with one attempt (PROBE), run at most once per READY_EVERY_S whoever asks,
        one at a time: a caller meanwhile (a load balancer's probes of /readyz) gets the last
        answer at once, so a slow storage holds one thread, never all of them.

        Raises:
            StorageFault: the last check failed.
        """
        fresh = time.monotonic() - self._checked_at < READY_EVERY_S
        if fresh or not self._checking.acquire(blocking=False):
            if self._fault is not None:
                raise StorageFault(self._fault)
            return
        try:
            self.check(PROBE)
            self._fault = None
        except StorageFault as exc:
            self._fault = exc.detail
            raise
        finally:
            self._checked_at = time.monotonic()
            self._checking.release()

    def check(self, tries: Tries = WORK) -> None:
        """The warehouse can be reached and listed (its bucket exists and the service's
        credentials may list it; a local folder exists or can be made), the LIST trying as
        `tries` says.

        Raises:
            StorageFault: it cannot; the message names why.
        """
        with self.faults(self.warehouse, "list the warehouse"):
            if self.on_s3:
                bucket, prefix = _bucket_key(self.warehouse)
                self._s3(tries).call_s3(
                    "list_objects_v2", Bucket=bucket, Prefix=prefix + "/", MaxKeys=1
                )
                return
            path = _local(self.warehouse)
            os.makedirs(path, exist_ok=True)
            if not os.access(path, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "the service may not write there", path)

    # -- reads and writes -----------------------------------------------------------------

    def read(self, uri: str, *, limit: int, cache: bool = False) -> bytes:
        """The bytes of the file at `uri`, in one read (one GET on S3), at most `limit` of them;
        kept when `cache` (a file never rewritten). On local storage only a regular file is
        read (a FIFO would never answer, a device never end).

        Raises:
            FileNotFoundError: no file there (or, locally, none of the regular kind).
            TooLarge: more than `limit` bytes.
            StorageFault: the storage failed.
        """
        if cache:
            with self._cache_lock:
                found = self._cache.get(uri)
                if found is not None:
                    self._cache.move_to_end(uri)
                    return found
        with self.faults(uri, "read"):
            data = self._read(uri, limit + 1)
        if len(data) > limit:
            raise TooLarge(uri, limit)
        if cache:
            self._remember(uri, data)
        return data

    def _read(self, uri: str, most: int) -> bytes:
        if self.on_s3 and _is_s3(uri):
            try:
                data: bytes = self._s3().cat_file(_path(uri), start=0, end=most)
            except OSError as exc:
                code = _code(exc)
                if code in ("InvalidRange", "416"):
                    return b""  # an empty object: S3 has no first byte to give
                if code == "KeyTooLongError":  # a name the client chose
                    raise FileNotFoundError(errno.ENOENT, "no such key", uri) from exc
                raise
            return data
        path = _local(uri)
        try:
            found = os.stat(path)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP):
                # a path the client chose that names no file
                raise FileNotFoundError(errno.ENOENT, "no such file", path) from exc
            raise
        if not stat.S_ISREG(found.st_mode):
            raise FileNotFoundError(errno.ENOENT, "not a regular file", path)
        with open(path, "rb") as stream:
            return stream.read(most)

    def reader(self, check: Callable[[str, bytes], None] | None = None) -> FileIO:
        """A FileIO for pyiceberg to read the files a commit names with: each read once,
        whole, through `read` (bounded, cached), and given to `check` (the uri, the bytes)
        before pyiceberg parses it."""
        return _Reader(self, check)

    def _remember(self, uri: str, data: bytes) -> None:
        with self._cache_lock:
            self._cached += len(data) - len(self._cache.get(uri, b""))
            self._cache[uri] = data
            while len(self._cache) > 1 and self._cached > CACHED_BYTES:
                _, dropped = self._cache.popitem(last=False)
                self._cached -= len(dropped)

    def create(self, uri: str, data: bytes) -> None:
        """Write a new file at `uri`, never over another: one conditional PUT on S3
        (`If-None-Match: *`), an exclusive create locally.

        Raises:
            FileExistsError: a file is there already.
            StorageFault: the storage failed.
        """
        with self.faults(uri, "write"):
            if self.on_s3 and _is_s3(uri):
                fs = self._s3()
                try:
                    fs.pipe_file(_path(uri), data, mode="create")
                except OSError as exc:
                    if not isinstance(exc, FileExistsError) and _code(exc) not in _PRECONDITION:
                        raise
                    # botocore tries a PUT again when its answer was lost: the first may have
                    # landed, which the second's 412 reports. The names are random: an object
                    # of these bytes' size is that first PUT
                    if fs.info(_path(uri))["size"] != len(data):
                        raise FileExistsError(errno.EEXIST, "a file is there", uri) from exc
                return
            path = _local(uri)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "xb") as stream:
                stream.write(data)

    def delete_file(self, uri: str) -> bool:
        """Delete one file: whether it was there (a file already gone is no fault).

        Raises:
            StorageFault: the storage failed.
        """
        with self.faults(uri, "delete"):
            try:
                if self.on_s3 and _is_s3(uri):
                    self._s3().rm_file(_path(uri))  # s3n:// too, which s3fs would misread
                else:
                    self.io.delete(uri)
            except FileNotFoundError:
                return False
        return True

    # -- a folder's objects ---------------------------------------------------------------

    def holds_objects(self, folder: str) -> bool:
        """Whether anything lies under `folder`: an object (one LIST of at most one key on
        S3), a regular file (local storage; links and empty folders do not count).

        Raises:
            StorageFault: the storage failed.
        """
        with self.faults(folder, "list"):
            if self.on_s3 and _is_s3(folder):
                bucket, prefix = _bucket_key(folder)
                page = self._s3().call_s3(
                    "list_objects_v2", Bucket=bucket, Prefix=prefix.rstrip("/") + "/", MaxKeys=1
                )
                return bool(page.get("Contents"))
            path = _local(folder)
            if not os.path.isdir(path) or os.path.islink(path):
                return os.path.lexists(path)
            # regular files only, links not followed: what a purge of a table here would take
            for root, _, files in os.walk(path):
                for name in files:
                    found = os.path.join(root, name)
                    if os.path.isfile(found) and not os.path.islink(found):
                        return True
            return False

    def listing(self, folder: str) -> list[str]:
        """Every object under `folder` (S3 only), as URIs of `folder`'s scheme: files and the
        zero-byte `name/` markers other tools leave. Read from the store, not a cache.

        Raises:
            StorageFault: the storage failed.
        """
        bucket, prefix = _bucket_key(folder)
        scheme = urlparse(folder).scheme
        keys: list[str] = []
        with self.faults(folder, "list"):
            fs = self._s3()
            more: dict[str, str] = {}
            while True:
                page = fs.call_s3(
                    "list_objects_v2", Bucket=bucket, Prefix=prefix.rstrip("/") + "/", **more
                )
                keys.extend(f"{scheme}://{bucket}/{o['Key']}" for o in page.get("Contents", []))
                if not page.get("IsTruncated"):
                    return keys
                more = {"ContinuationToken": page["NextContinuationToken"]}

    def delete(self, uris: Sequence[str]) -> tuple[int, list[str]]:
        """Delete the objects `uris` (S3), in batches of DELETE_BATCH keys per request: the
        number deleted, and those the store refused or a fault left (each logged); a batch
        that fails does not stop the next."""
        deleted, refused = 0, list[str]()
        by_bucket: dict[str, list[str]] = {}
        for uri in uris:
            bucket, key = _bucket_key(uri)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            for start in range(0, len(keys), DELETE_BATCH):
                batch = keys[start : start + DELETE_BATCH]
                try:
                    with self.faults(f"s3://{bucket}/{batch[0]}", "delete"):
                        answer = self._s3().call_s3(
                            "delete_objects",
                            Bucket=bucket,
                            Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                        )
                except StorageFault:  # logged; the next batches are tried all the same
                    refused.extend(f"s3://{bucket}/{key}" for key in batch)
                    continue
                errors = answer.get("Errors", [])
                for error in errors:
                    log.warning(
                        "could not delete s3://%s/%s: %s %s",
                        bucket,
                        error.get("Key"),
                        error.get("Code"),
                        error.get("Message"),
                    )
                    refused.append(f"s3://{bucket}/{error.get('Key')}")
                deleted += len(batch) - len(errors)
        return deleted, refused


class _Reader(FileIO):
    """The FileIO pyiceberg reads a commit's manifest lists and manifests with: each file
    read once, whole, through `Storage.read` (bounded by the caller's `limit`, cached)."""

    limit = 256 * 1024 * 1024

    def __init__(self, storage: Storage, check: Callable[[str, bytes], None] | None) -> None:
        super().__init__(properties={})
        self.storage = storage
        self.check = check

    def new_input(self, location: str) -> InputFile:
        return _Bytes(location, lambda: self._read(location))

    def _read(self, location: str) -> bytes:
        data = self.storage.read(location, limit=self.limit, cache=True)
        if self.check is not None:
            self.check(location, data)
        return data

    def new_output(self, location: str) -> OutputFile:
        raise PermissionError(f"{location}: the commit reader writes nothing")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise PermissionError(f"{location}: the commit reader deletes nothing")


class _Bytes(InputFile):
    def __init__(self, location: str, read: Callable[[], bytes]) -> None:
        super().__init__(location)
        self._read = read

    def __len__(self) -> int:
        return len(self._read())

    def exists(self) -> bool:
        try:
            self._read()
        except FileNotFoundError:
            return False
        return True

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._read())


def _is_s3(uri: str) -> bool:
    return urlparse(uri).scheme.lower() in S3_SCHEMES


def _path(uri: str) -> str:
    """`s3://bucket/key` as s3fs names it: `bucket/key`."""
    return uri.split("://", 1)[1]


def _bucket_key(uri: str) -> tuple[str, str]:
    bucket, _, key = _path(uri).partition("/")
    return bucket, key


def _local(uri: str) -> str:
    path = locations.local_path(uri)
    if path is None:
        raise FileNotFoundError(errno.ENOENT, "not a local file URI", uri)
    return path


def _code(exc: BaseException) -> str | None:
    """The S3 error code behind an error s3fs translated (its cause is botocore's)."""
    response = getattr(exc.__cause__, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return str(code) if code is not None else None


def _is_storage_error(exc: BaseException) -> bool:
    """An error of the storage or the way to it: the OS's, botocore's, aiohttp's."""
    if isinstance(exc, OSError):
        return True
    module = type(exc).__module__
    return module.startswith(("botocore", "aiobotocore", "aiohttp", "s3fs"))


def _is_an_answer(exc: BaseException) -> bool:
    """A storage error that answers the question asked (no such file, one there already),
    which the caller handles; a missing bucket is the storage's fault, not an answer."""
    if isinstance(exc, FileExistsError):
        return True
    return isinstance(exc, FileNotFoundError) and _code(exc) != "NoSuchBucket"


def _said(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]
