"""An S3-compatible server on loopback: S3Proxy over a local folder (Apache-2.0, one jar).

    bin/s3-local --port 9000 --dir var/s3          # foreground, until SIGTERM or Ctrl-C

    with LocalS3.start(Path("/tmp/s3")) as s3:     # a free loopback port, the bucket `lake`
        s3.endpoint                                 # http://127.0.0.1:<port>
        s3.env                                      # AWS_ACCESS_KEY_ID, ... for a client
        s3.requests()                               # requests served so far, by kind

For the tests, the demo (`bin/run --storage s3`), the benchmarks and anyone trying lakelock on
object storage on one machine. It speaks the S3 API as AWS does (signature v4, list-v2,
multipart, batch delete, conditional writes), path-style: clients set their endpoint and path
style as for any S3-compatible store, and read their keys from the environment (`env`), never
from lakelock's settings. The jar (`jobkit.maven`, set `s3-server`) is fetched with Maven once
into a cache; objects are files under `<dir>/data`, kept when the server is started again on the
same folder. With `count=True` it logs every request, and `requests()` counts them by kind
(GET, PUT, LIST, HEAD, DELETE, ...): what a commit costs on object storage, read off the server.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx

from demo.service import foreground, free_port, terminate
from jobkit.maven import jars

__all__ = ["ACCESS_KEY", "BUCKET", "ENV", "REGION", "SECRET_KEY", "LocalS3", "main"]

BUCKET = "lake"
REGION = "us-east-1"
# the local server's own keys: on loopback only, and clients read them from the environment
ACCESS_KEY, SECRET_KEY = "lakelock-local", "lakelock-local-secret"
ENV = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    "AWS_REGION": REGION,
    "AWS_DEFAULT_REGION": REGION,
}
"""The standard AWS variables a client of the local server reads its keys and region from."""

_PROPERTIES = """\
s3proxy.endpoint=http://127.0.0.1:{port}
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity={identity}
s3proxy.credential={credential}
jclouds.provider=filesystem-nio2
jclouds.filesystem.basedir={data}
"""
# one line per request when the server logs at debug level ("{GET@1a2b http://... HTTP/1.1}")
_REQUEST = re.compile(r"S3ProxyHandler.*request: .*\{([A-Z]+)@\w+ (\S+) HTTP/")


def request_kind(method: str, url: str) -> str:
    """What an S3 request is, as S3 bills it: LIST for a listing (a GET of a bucket with
    `list-type`, or of a bucket alone), DELETE for one delete or a batch (`POST ?delete`), else
    the method (GET, PUT, HEAD, POST)."""
    path, _, query = url.partition("://")[2].partition("/")[2].partition("?")
    params = {part.split("=", 1)[0] for part in query.split("&") if part}
    if method == "GET" and ("list-type" in params or "/" not in path.strip("/")):
        return "LIST"
    if method == "POST" and "delete" in params:
        return "DELETE"
    return method


@dataclass
class LocalS3:
    folder: Path
    port: int
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    count: bool = False
    _read: int = 0  # how far `requests` has read the log
    _counted: Counter[str] = field(default_factory=Counter)

    @classmethod
    def start(
        cls,
        folder: Path,
        *,
        port: int | None = None,
        bucket: str = BUCKET,
        count: bool = False,
        timeout_s: float = 60.0,
    ) -> LocalS3:
        """Start the server on `port` (default: free) over `folder`, with `bucket` in it.

        Raises:
            jobkit.maven.MavenMissing: the jar is not cached and cannot be fetched.
            RuntimeError: the server exited or did not answer within `timeout_s` (its log is
                named).
        """
        folder = folder.resolve()
        (folder / "data" / bucket).mkdir(parents=True, exist_ok=True)  # a bucket is a folder
        port = port or free_port()
        config = folder / "s3proxy.conf"
        config.write_text(
            _PROPERTIES.format(
                port=port, identity=ACCESS_KEY, credential=SECRET_KEY, data=folder / "data"
            )
        )
        home = os.environ.get("JAVA_HOME")
        java = str(Path(home) / "bin" / "java") if home else "java"
        log = (folder / "s3proxy.log").open("ab")
        process = subprocess.Popen(
            [
                java,
                "-Xms64m",
                "-Xmx384m",
                "-XX:+UseSerialGC",
                "-jar",
                str(jars("s3-server")[0]),
                "--properties",
                str(config),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "LOG_LEVEL": "debug" if count else "warn"},
            start_new_session=True,  # a Ctrl-C of the shell reaches us, and we stop it
        )
        server = cls(folder, port, process, log, count)
        deadline = time.monotonic() + timeout_s
        while not server.answers():
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"S3Proxy did not start on 127.0.0.1:{port}; see {log.name}")
            time.sleep(0.1)
        return server

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables a client of this server reads its keys and region from."""
        return dict(ENV)

    @property
    def settings(self) -> dict[str, str]:
        """The lakelock service's settings for a warehouse on this server (its keys: `env`)."""
        return {
            "LAKELOCK_CATALOG_S3_ENDPOINT": self.endpoint,
            "LAKELOCK_CATALOG_S3_REGION": REGION,
            "LAKELOCK_CATALOG_S3_PATH_STYLE": "true",
        }

    def warehouse(self, prefix: str, bucket: str = BUCKET) -> str:
        return f"s3://{bucket}/{prefix.strip('/')}"

    def answers(self) -> bool:
        try:
            httpx.get(self.endpoint, timeout=1)  # 403 without a signature: it is up
        except httpx.TransportError:
            return False
        return True

    def objects(self, prefix: str = "", bucket: str = BUCKET) -> list[str]:
        """The keys under `prefix`, as the server lists them (folders' marker objects too)."""
        client = self.client()
        keys: list[str] = []
        more: dict[str, str] = {}
        while True:
            page = client.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, **more)
            keys.extend(item["Key"] for item in page.get("Contents", []))
            if not page.get("IsTruncated"):
                return sorted(keys)
            more = {"ContinuationToken": page["NextContinuationToken"]}

    def client(self) -> Any:
        """An s3fs file system on this server (its raw calls: `call_s3("put_object", ...)`)."""
        from s3fs import S3FileSystem

        return S3FileSystem(
            key=ACCESS_KEY,
            secret=SECRET_KEY,
            client_kwargs={"endpoint_url": self.endpoint, "region_name": REGION},
            config_kwargs={"s3": {"addressing_style": "path"}},
            use_listings_cache=False,
            skip_instance_cache=True,
        )

    def requests(self) -> Counter[str]:
        """The requests served since the server started, by kind (`request_kind`), read from
        its log (it logs a request as it takes it, before it answers); needs `count`."""
        if not self.count:
            raise RuntimeError("start the server with count=True to count its requests")
        with (self.folder / "s3proxy.log").open("rb") as log:
            log.seek(self._read)
            text = log.read()
        whole = text[: text.rfind(b"\n") + 1]  # a line being written is read next time
        self._read += len(whole)
        for method, url in _REQUEST.findall(whole.decode(errors="replace")):
            self._counted[request_kind(method, url)] += 1
        return Counter(self._counted)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM, then wait (SIGKILL after `timeout_s`)."""
        terminate(self.process, timeout_s)
        self.log.close()

    def __enter__(self) -> LocalS3:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bin/s3-local",
        description="Run an S3-compatible server (S3Proxy) on 127.0.0.1 in the foreground, "
        f"with the bucket {BUCKET!r}, until SIGTERM or Ctrl-C.",
    )
    parser.add_argument("--port", type=int, default=9000, help="its port (default 9000)")
    parser.add_argument("--dir", type=Path, default=Path("var/s3"), help="its data folder")
    parser.add_argument("--bucket", default=BUCKET, help=f"the bucket made (default {BUCKET})")
    args = parser.parse_args(argv)

    def banner(s3: LocalS3) -> str:
        exports = " ".join(f"{k}={v}" for k, v in s3.env.items())
        return (
            f"S3 on {s3.endpoint}, bucket {args.bucket} (objects in {s3.folder / 'data'}); its "
            f"clients: {exports}; stop with SIGTERM"
        )

    return foreground(
        lambda: LocalS3.start(args.dir, port=args.port, bucket=args.bucket),
        banner,
        lambda s3: s3.process,
    )


if __name__ == "__main__":
    sys.exit(main())
