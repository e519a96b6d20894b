"""Trino, the query engine that reads the lake, assembled from Maven Central and run on loopback.

    python -m demo.trino                           # assemble Trino once into the cache
    bin/trino --uri http://127.0.0.1:8080/iceberg --token T --catalog lake
                                                   # a Trino on :8081 reading lakelock's front
    with TrinoServer({"lake": front_catalog(uri, token)}) as trino:
        trino.query("SELECT count(*) FROM lake.db.events")   # rows, through the `trino` client
        trino.create_catalog("other", front_catalog(uri2, token))   # one more, no restart

Trino ships as a tarball and a launcher script that Maven Central does not serve here. What it
does serve are the jars: `trino-main` and its dependencies make the server's classpath, and
`trino-iceberg` with its own make the Iceberg plugin's folder (the SPI and what the server
provides to plugins left out, as Trino's plugin packaging leaves them out), both resolved with
the versions of Trino's own BOM (`io.trino:trino-root`). Two small pieces the tarball carries are
made here: the server's `main` (`io.trino.server.TrinoServer`, three lines that start
`io.trino.server.Server`) and the plugin's service file naming `IcebergPlugin`. The result goes
into `~/.cache/lakelock/trino/<version>` (beside the jars cache, `LAKELOCK_JARS_CACHE`), once.

For the tests and anyone trying lakelock on one machine, as demo.kafka's broker and demo.s3's
store: the server listens on 127.0.0.1 only. Trino 479 and later run on Java 25:
`LAKELOCK_TRINO_JAVA_HOME`, else the newest JDK of 25 or later under `/usr/lib/jvm`. A catalog
on lakelock's front is Trino's Iceberg connector with `iceberg.catalog.type=rest` and the job
token as its OAuth2 token (`front_catalog`): Trino's reads and commits then go through the front
like any Iceberg client's (docs/catalogs.md, Trino).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from demo.service import foreground, free_port, terminate
from jobkit.maven import MavenMissing, cache_root, copy_dependencies

__all__ = [
    "VERSION",
    "TrinoMissing",
    "TrinoServer",
    "front_catalog",
    "home",
    "install",
    "java_home",
    "main",
]

VERSION = "483"
"""The newest Trino whose jars Maven Central serves here in full (479 to 482 lack some)."""

_PLUGIN = "io.trino.plugin.iceberg.IcebergPlugin"

# what trino-iceberg declares `provided`: the server gives them to every plugin, so the
# plugin's folder must not carry them (declared `provided` here, they stay out with what they
# would bring)
_PROVIDED = (
    ("io.trino", "trino-spi"),
    ("io.airlift", "slice"),
    ("com.fasterxml.jackson.core", "jackson-annotations"),
    ("io.opentelemetry", "opentelemetry-api"),
    ("io.opentelemetry", "opentelemetry-api-incubator"),
    ("io.opentelemetry", "opentelemetry-common"),
    ("io.opentelemetry", "opentelemetry-context"),
    ("org.locationtech.jts", "jts-core"),
)

_LAUNCHER = """package io.trino.server;

public final class TrinoServer
{
    private TrinoServer() {}

    public static void main(String[] args)
    {
        String version = Server.class.getPackage().getImplementationVersion();
        new Server().start(version == null ? "%s" : version);
    }
}
"""

# the JVM options of Trino's own etc/jvm.config, sized for a test on a small machine
_JVM = (
    "-XX:+UseG1GC",
    "-XX:G1HeapRegionSize=32M",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-OmitStackTraceInFastThrow",
    "-XX:ReservedCodeCacheSize=256M",
    "-XX:PerMethodRecompilationCutoff=10000",
    "-XX:PerBytecodeRecompilationCutoff=10000",
    "-Djdk.attach.allowAttachSelf=true",
    "-Djdk.nio.maxCachedBufferSize=2000000",
    "--add-modules=jdk.incubator.vector",
    "--sun-misc-unsafe-memory-access=allow",
    "--enable-native-access=ALL-UNNAMED",
)


class TrinoMissing(RuntimeError):
    """Trino cannot be had here: no JDK 25, no Maven, or Maven could not fetch it."""


def home() -> Path:
    """Where the assembled Trino is (or goes)."""
    return cache_root().parent / "trino" / VERSION


def java_home() -> Path:
    """A JDK 25 or later: `LAKELOCK_TRINO_JAVA_HOME`, else the newest under /usr/lib/jvm.

    Raises:
        TrinoMissing: none found.
    """
    configured = os.environ.get("LAKELOCK_TRINO_JAVA_HOME")
    candidates = [Path(configured)] if configured else sorted(Path("/usr/lib/jvm").glob("*"))
    found = [c for c in candidates if _feature(c) >= 25]
    if not found:
        where = configured or "/usr/lib/jvm"
        raise TrinoMissing(
            f"Trino {VERSION} runs on Java 25 or later and none is in {where}: install one "
            "(Temurin 25) or set LAKELOCK_TRINO_JAVA_HOME to it"
        )
    return max(found, key=_feature)


def _feature(jdk: Path) -> int:
    """The JDK's feature release (25), from its `release` file; 0 when it is no JDK."""
    release = jdk / "release"
    if not (jdk / "bin" / "javac").is_file() or not release.is_file():
        return 0
    match = re.search(r'JAVA_VERSION="(\d+)', release.read_text())
    return int(match.group(1)) if match else 0


def install() -> Path:
    """Assemble Trino into `home()` unless it is there; its folder.

    Raises:
        TrinoMissing: no JDK 25, or no Maven.
        MavenMissing: Maven could not fetch Trino (its last lines named).
    """
    target = home()
    if (target / "lib" / "trino-server-launcher.jar").is_file():
        return target
    jdk = java_home()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise TrinoMissing(f"Trino {VERSION} is assembled with Maven (mvn), which is missing")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".assemble-") as tmp:
        work = Path(tmp)
        out = work / "trino"
        _copy(mvn, work / "server", _pom("trino-main", ("com.google.guava", "guava")), out / "lib")
        plugin = out / "plugin" / "iceberg"
        _copy(mvn, work / "iceberg", _pom("trino-iceberg", provided=_PROVIDED), plugin)
        _launcher(jdk, work / "launcher", out / "lib")
        with zipfile.ZipFile(plugin / "zz-lakelock-iceberg-plugin-service.jar", "w") as jar:
            jar.writestr("META-INF/services/io.trino.spi.Plugin", _PLUGIN + "\n")
        if target.exists():  # another process got there first: keep its complete copy
            return target
        out.rename(target)
    return target


def _pom(
    artifact: str,
    *extra: tuple[str, str],
    provided: Sequence[tuple[str, str]] = (),
) -> str:
    """A pom that resolves io.trino:`artifact` (and `extra`) at Trino's BOM versions."""

    def dependency(group: str, name: str, version: str = "", scope: str = "") -> str:
        versioned = f"<version>{version}</version>" if version else ""
        scoped = f"<scope>{scope}</scope>" if scope else ""
        return (
            f"<dependency><groupId>{group}</groupId><artifactId>{name}</artifactId>"
            f"{versioned}{scoped}</dependency>"
        )

    listed = dependency("io.trino", artifact, VERSION)
    listed += "".join(dependency(g, a) for g, a in extra)
    listed += "".join(dependency(g, a, scope="provided") for g, a in provided)
    bom = dependency("io.trino", "trino-root", VERSION, "import").replace(
        "<scope>", "<type>pom</type><scope>"
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>lakelock</groupId><artifactId>trino-{artifact}</artifactId>"
        "<version>1</version><packaging>pom</packaging>"
        f"<dependencyManagement><dependencies>{bom}</dependencies></dependencyManagement>"
        f"<dependencies>{listed}</dependencies></project>"
    )


def _copy(mvn: str, work: Path, pom: str, into: Path) -> None:
    work.mkdir(parents=True)
    (work / "pom.xml").write_text(pom)
    copy_dependencies(mvn, work, into, what=f"Trino {VERSION}")


def _launcher(jdk: Path, work: Path, lib: Path) -> None:
    """Compile the server's `main` into lib/trino-server-launcher.jar."""
    source = work / "src" / "io" / "trino" / "server" / "TrinoServer.java"
    source.parent.mkdir(parents=True)
    source.write_text(_LAUNCHER % VERSION)
    classes = work / "classes"
    subprocess.run(
        [str(jdk / "bin" / "javac"), "-d", str(classes), "-cp", f"{lib}/*", str(source)],
        check=True,
        capture_output=True,
    )
    with zipfile.ZipFile(lib / "trino-server-launcher.jar", "w") as jar:
        jar.writestr(
            "META-INF/MANIFEST.MF",
            "Manifest-Version: 1.0\nMain-Class: io.trino.server.TrinoServer\n"
            f"Implementation-Version: {VERSION}\n",
        )
        for file in classes.rglob("*.class"):
            jar.write(file, file.relative_to(classes).as_posix())


def front_catalog(
    uri: str, token: str, *, s3: Mapping[str, str] | None = None, **properties: str
) -> dict[str, str]:
    """The properties of a Trino catalog on lakelock's front at `uri` (`.../iceberg`) as the
    job token `token`: Trino's Iceberg connector on a REST catalog, local files readable, and
    `s3` (`endpoint`, `region`, `access-key`, `secret-key`) for a warehouse on S3; `properties`
    over them (dots as underscores: `iceberg_file_format="PARQUET"`)."""
    catalog = {
        "connector.name": "iceberg",
        "iceberg.catalog.type": "rest",
        "iceberg.rest-catalog.uri": uri,
        "iceberg.rest-catalog.security": "OAUTH2",
        "iceberg.rest-catalog.oauth2.token": token,
        "fs.native-local.enabled": "true",
        "local.location": "/",
    }
    if s3:
        catalog.update(
            {
                "fs.native-s3.enabled": "true",
                "s3.endpoint": s3["endpoint"],
                "s3.region": s3["region"],
                "s3.path-style-access": "true",
                "s3.aws-access-key": s3["access-key"],
                "s3.aws-secret-key": s3["secret-key"],
            }
        )
    catalog.update({key.replace("_", "."): value for key, value in properties.items()})
    return catalog


class TrinoServer:
    """One Trino coordinator (which also runs the work) on loopback, with `catalogs`
    (name -> connector properties) and any added while it runs (`create_catalog`), in a folder
    of its own; stopped on exit.

        with TrinoServer({"lake": front_catalog(uri, token)}, port=18080) as trino:
            trino.query("SHOW TABLES FROM lake.db")
    """

    def __init__(
        self,
        catalogs: Mapping[str, Mapping[str, str]],
        *,
        port: int | None = None,
        heap: str = "2G",
        workdir: Path | None = None,
    ) -> None:
        self.catalogs = {name: dict(props) for name, props in catalogs.items()}
        self.port = port or free_port()
        self.heap = heap
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout_s: float = 180.0) -> TrinoServer:
        """Start it and wait until it answers queries.

        Raises:
            TrinoMissing: not assembled and cannot be (install()).
            RuntimeError: it exited, or did not answer within `timeout_s` (its log's tail).
        """
        root = install()
        jdk = java_home()
        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="lakelock-trino-")
            self.workdir = Path(self._tmp.name)
        etc = self.workdir / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        _properties(
            etc / "config.properties",
            {
                "coordinator": "true",
                "node-scheduler.include-coordinator": "true",
                "http-server.http.port": str(self.port),
                "discovery.uri": self.url,
                "query.max-memory": "1GB",
                "query.max-memory-per-node": "512MB",
                "node.internal-address": "127.0.0.1",
                # the catalogs come with CREATE CATALOG once it answers (create_catalog), kept
                # in memory: the server's life is the object's
                "catalog.management": "dynamic",
                "catalog.store": "memory",
                "plugin.dir": str(root / "plugin"),
            },
        )
        command = [
            str(jdk / "bin" / "java"),
            f"-Xmx{self.heap}",
            *_JVM,
            "-Dnode.environment=lakelock",
            f"-Dnode.data-dir={self.workdir / 'data'}",
            f"-Dconfig={etc / 'config.properties'}",
            "-cp",
            f"{root / 'lib'}/*",
            "io.trino.server.TrinoServer",
        ]
        self.log = self.workdir / "server.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir
            )
        deadline = time.monotonic() + timeout_s
        while not self._ready():
            if self.process.poll() is not None:
                said = f"Trino exited ({self.process.returncode}):\n{self._tail()}"
                self.stop()  # its temporary folder too
                raise RuntimeError(said)
            if time.monotonic() > deadline:
                said = f"Trino did not start in {timeout_s:g}s:\n{self._tail()}"
                self.stop()
                raise RuntimeError(said)
            time.sleep(0.5)
        try:
            for name, props in list(self.catalogs.items()):
                self.create_catalog(name, props)
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        try:
            info = httpx.get(f"{self.url}/v1/info", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return False
        return info.get("starting") is False

    def _tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def query(self, sql: str, *, user: str = "lakelock") -> list[list[Any]]:
        """The rows of `sql`, run to the end (the `trino` client's DB-API).

        Raises:
            trino.exceptions.TrinoQueryError: the query failed (its message says why).
        """
        import trino

        # the client's connect carries no annotations
        connect: Any = trino.dbapi.connect
        with connect(host="127.0.0.1", port=self.port, user=user) as conn:
            cursor = conn.cursor()
            cursor.execute(sql)
            rows: list[list[Any]] = cursor.fetchall()
        return rows

    def create_catalog(self, name: str, properties: Mapping[str, str]) -> None:
        """Add the catalog `name` (connector properties, `connector.name` among them) to the
        running server: a second warehouse without a second Trino.

        Raises:
            ValueError: `properties` name no connector, or not as a plain name.
            trino.exceptions.TrinoQueryError: Trino refused it (its message says why).
        """
        props = dict(properties)
        connector = props.pop("connector.name", "")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", connector):
            # Trino takes the connector's name bare (a quoted one is refused as unknown)
            raise ValueError(f"catalog {name!r}: `connector.name` {connector!r} is not a name")
        sql = f"CREATE CATALOG {_identifier(name)} USING {connector}"
        if props:
            pairs = (f"{_identifier(key)} = {_literal(value)}" for key, value in props.items())
            sql += f" WITH ({', '.join(pairs)})"
        self.query(sql)
        self.catalogs[name] = dict(properties)

    def drop_catalog(self, name: str) -> None:
        """Remove the catalog `name` from the running server."""
        self.query(f"DROP CATALOG {_identifier(name)}")
        self.catalogs.pop(name, None)

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process, timeout_s=30)
        self.process = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.workdir = None

    def __enter__(self) -> TrinoServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def _identifier(name: str) -> str:
    """`name` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    """`value` as a SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def _properties(path: Path, values: Mapping[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m demo.trino`: assemble Trino (bin/test runs it before the tests);
    `python -m demo.trino serve --uri U --token T`: run one on lakelock's front until
    interrupted (bin/trino)."""
    parser = argparse.ArgumentParser(prog="python -m demo.trino")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="run Trino with a catalog on lakelock's front")
    serve.add_argument("--uri", required=True, help="the front's REST catalog, .../iceberg")
    serve.add_argument("--token", default=os.environ.get("LAKELOCK_TOKEN"))
    serve.add_argument("--catalog", default="lakelock", help="the catalog's name in Trino")
    serve.add_argument("--port", type=int, default=8081)
    args = parser.parse_args(argv)
    try:
        root = install()
    except (TrinoMissing, MavenMissing) as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.command != "serve":
        print(root)
        return 0
    if not args.token:
        parser.error("--token (or LAKELOCK_TOKEN): a job token of the service")
    server = TrinoServer({args.catalog: front_catalog(args.uri, args.token)}, port=args.port)
    return foreground(
        server.start,
        lambda s: f"Trino {VERSION} on {s.url}, catalog {args.catalog} on {args.uri}",
        lambda s: s.process,
    )


if __name__ == "__main__":
    sys.exit(main())
