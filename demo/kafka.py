"""A single-node Kafka broker on loopback, from Apache Kafka's own jars (KRaft, no ZooKeeper).

    bin/kafka-local --port 9092 --dir var/kafka      # foreground, until SIGTERM or Ctrl-C

    with LocalKafka.start(Path("/tmp/k")) as kafka:   # a free loopback port
        kafka.create_topic("events", partitions=4)
        kafka.produce("events", [(b'{"id": 1}', b'{"id": 1, ...}'), (b'{"id": 1}', None)])
        kafka.end_offsets("events")                   # {0: 2, 1: 0, 2: 0, 3: 0}
        kafka.delete_records("events", {0: 1})        # retention, by hand: offsets below 1 go

For the tests, the demo (`bin/run --source kafka`) and anyone trying lakelock on one machine:
the broker and the controller listen on 127.0.0.1 only. The jars (`jobkit.maven`, set
`kafka-broker`) are fetched with Maven once into a cache; the log folder is formatted on first
start and kept, so a broker started again on the same folder keeps its topics and offsets.
The Python side (topics, producing, deleting records) is confluent-kafka's client.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from demo.service import foreground, free_port, terminate
from jobkit.maven import jars

__all__ = ["LocalKafka", "Message", "as_messages", "main"]

_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={logs}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
"""


def _java(classpath: str, *args: str) -> list[str]:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else "java"
    # a small heap: one broker of a few topics on a shared 2-core machine
    return [java, "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-cp", classpath, *args]


def _cluster_id() -> str:
    """A new cluster id as Kafka makes them (`Uuid.randomUuid`): a UUID in URL-safe base64,
    unpadded, never starting with "-" (the storage tool would read it as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class LocalKafka:
    folder: Path
    port: int
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    _admin_client: Any = field(default=None, repr=False)

    @classmethod
    def start(
        cls, folder: Path, *, port: int | None = None, timeout_s: float = 120.0
    ) -> LocalKafka:
        """Format `folder` (first time only) and start a broker on `port` (default: free).

        Raises:
            jobkit.maven.MavenMissing: the jars are not cached and cannot be fetched.
            RuntimeError: the broker exited or did not listen within `timeout_s` (its log is
                named).
        """
        folder = folder.resolve()
        folder.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        classpath = os.pathsep.join(str(p) for p in jars("kafka-broker"))
        config = folder / "server.properties"
        config.write_text(
            _PROPERTIES.format(port=port, controller=free_port(), logs=folder / "data")
        )
        if not (folder / "data" / "meta.properties").is_file():
            formatted = subprocess.run(
                [
                    *_java(classpath, "kafka.tools.StorageTool", "format", "--ignore-formatted"),
                    "--cluster-id",
                    _cluster_id(),
                    "--config",
                    str(config),
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if formatted.returncode != 0:
                said = (formatted.stdout + formatted.stderr).strip()[-2000:]
                raise RuntimeError(f"Kafka's storage tool could not format {folder}: {said}")
        log = (folder / "broker.log").open("ab")
        process = subprocess.Popen(
            _java(classpath, "kafka.Kafka", str(config)),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C of the shell reaches us, and we stop it
        )
        kafka = cls(folder, port, process, log)
        deadline = time.monotonic() + timeout_s
        while not _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                kafka.stop()
                raise RuntimeError(
                    f"the Kafka broker did not start on 127.0.0.1:{port}; see {log.name}"
                )
            time.sleep(0.2)
        kafka._wait_for_metadata(deadline)
        return kafka

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM, then wait for a clean shutdown (SIGKILL after `timeout_s`)."""
        self._admin_client = None  # before the broker goes: it would retry and log meanwhile
        terminate(self.process, timeout_s)
        self.log.close()

    def __enter__(self) -> LocalKafka:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the client side -------------------------------------------------------------------

    def _admin(self) -> Any:
        """One admin client per broker: its futures fail when it is collected before they
        resolve."""
        if self._admin_client is None:
            from confluent_kafka.admin import AdminClient

            self._admin_client = AdminClient(self._client_conf())
        return self._admin_client

    def _client_conf(self) -> dict[str, Any]:
        # librdkafka's info lines (a client going away) are noise in the tests' and demo's logs
        return {"bootstrap.servers": self.bootstrap, "log_level": 4}

    def _wait_for_metadata(self, deadline: float) -> None:
        """The port opens before the broker has joined its own quorum: wait until it answers."""
        while True:
            try:
                self._admin().list_topics(timeout=5)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def create_topic(self, name: str, *, partitions: int = 1) -> None:
        from confluent_kafka.admin import NewTopic

        (future,) = self._admin().create_topics([NewTopic(name, partitions, 1)]).values()
        future.result(60)

    def produce(self, topic: str, messages: Iterable[tuple[bytes | None, bytes | None]]) -> int:
        """Write (key, value) messages in order (a None value is a tombstone); returns how many.
        The default partitioner sends one key to one partition, so a key's order is kept."""
        from confluent_kafka import Producer

        producer = Producer({**self._client_conf(), "linger.ms": 5})
        count = 0
        for key, value in messages:
            while True:
                try:
                    producer.produce(topic, key=key, value=value)
                    break
                except BufferError:
                    producer.poll(0.5)
            count += 1
        if producer.flush(60) != 0:
            raise RuntimeError(f"{topic}: messages not delivered within 60 s")
        return count

    def end_offsets(self, topic: str) -> dict[int, int]:
        """The next offset of each partition of `topic` (the latest)."""
        return self._offsets(topic, "latest")

    def start_offsets(self, topic: str) -> dict[int, int]:
        """The earliest offset each partition of `topic` still holds."""
        return self._offsets(topic, "earliest")

    def _offsets(self, topic: str, which: str) -> dict[int, int]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        admin = self._admin()
        partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
        spec = OffsetSpec.latest() if which == "latest" else OffsetSpec.earliest()
        asked = {TopicPartition(topic, p): spec for p in partitions}
        return {tp.partition: f.result(30).offset for tp, f in admin.list_offsets(asked).items()}

    def delete_records(self, topic: str, before: dict[int, int]) -> None:
        """Delete each partition's records below its offset in `before`, as retention does."""
        from confluent_kafka import TopicPartition

        asked = [TopicPartition(topic, p, offset) for p, offset in before.items()]
        for future in self._admin().delete_records(asked).values():
            future.result(60)


Message = tuple[bytes | None, bytes | None]
"""(key, value) of one Kafka message; a None value is a tombstone."""


def as_messages(lines: Iterable[str], format: str, key_fields: Sequence[str]) -> list[Message]:
    """The generator's records as a change-data-capture producer writes them to a topic of
    several partitions: each message keyed by its row's key (so one key's changes stay in one
    partition, in order), a Debezium tombstone (`null`) as a null value under the deleted key,
    and an update that changes the key as a delete of the old key and an insert of the new one,
    each under its own key (Debezium's default for a primary-key change; one message keyed by
    either key would race the other key's changes in another partition). A record that cannot
    be parsed goes without a key, as a broken producer would send it.
    """
    out: list[Message] = []
    last_key: bytes | None = None
    for line in lines:
        if format == "debezium" and line == "null":
            out.append((last_key, None))
            continue
        try:
            record = json.loads(line)
        except ValueError:
            out.append((None, line.encode()))
            continue
        for key, value in _keyed(record, format, key_fields):
            last_key = key
            body = None if value is None else json.dumps(value, separators=(",", ":")).encode()
            out.append((key, body))
    return out


def _key_of(row: Any, key_fields: Sequence[str]) -> bytes | None:
    if not isinstance(row, dict) or not all(k in row for k in key_fields):
        return None
    return json.dumps({k: row[k] for k in key_fields}, sort_keys=True).encode()


def _keyed(record: Any, format: str, key_fields: Sequence[str]) -> list[tuple[bytes | None, Any]]:
    """(key, record) pairs for one parsed record: itself, or a key change split in two (for
    Debezium with the delete's tombstone between; a None record is a tombstone)."""
    if not isinstance(record, dict):
        return [(None, record)]
    if format == "debezium":
        wrapped = isinstance(record.get("payload"), dict)  # {"schema", "payload"}
        change = record["payload"] if wrapped else record

        def wrap(envelope: dict[str, Any]) -> dict[str, Any]:
            return {**record, "payload": envelope} if wrapped else envelope

        before, after = change.get("before"), change.get("after")
        old, new = _key_of(before, key_fields), _key_of(after, key_fields)
        if change.get("op") == "u" and old is not None and new is not None and old != new:
            return [
                (old, wrap({**change, "op": "d", "after": None})),
                (old, None),
                (new, wrap({**change, "op": "c", "before": None})),
            ]
        return [(new if after is not None else old, record)]
    if format == "canal":
        rows = record.get("data") or [None]
        new = _key_of(rows[0], key_fields)
        changed = (record.get("old") or [{}])[0] or {}
        if record.get("type") == "UPDATE" and any(k in changed for k in key_fields):
            before = {**rows[0], **changed}
            delete = {**record, "type": "DELETE", "data": [before], "old": None}
            return [
                (_key_of(before, key_fields), delete),
                (new, {**record, "type": "INSERT", "old": None}),
            ]
        return [(new, record)]
    return [(_key_of(record, key_fields), record)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bin/kafka-local",
        description="Run a single-node Kafka broker (KRaft) on 127.0.0.1 in the foreground, "
        "until SIGTERM or Ctrl-C.",
    )
    parser.add_argument("--port", type=int, default=9092, help="listener port (default 9092)")
    parser.add_argument("--dir", type=Path, default=Path("var/kafka"), help="its data folder")
    args = parser.parse_args(argv)
    return foreground(
        lambda: LocalKafka.start(args.dir, port=args.port),
        lambda kafka: f"kafka on {kafka.bootstrap} (data in {kafka.folder}); stop with SIGTERM",
        lambda kafka: kafka.process,
    )


if __name__ == "__main__":
    sys.exit(main())
