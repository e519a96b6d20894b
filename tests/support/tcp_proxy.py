"""A loopback TCP proxy that a test can cut and restore, to stage a database outage.

    with TcpProxy("127.0.0.1", 3306) as proxy:     # the service connects to proxy.port
        proxy.cut()          # drop every open connection; refuse new ones (connection refused)
        proxy.blackhole()    # or: accept and hold connections, forward nothing (a dead network)
        proxy.restore()      # forward again, on the same port

One thread accepts; each connection gets two pump threads. Nothing is shared with the server
under test but the sockets.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._forwarding = True
        self.port = 0
        self._listen()

    # -- control ------------------------------------------------------------------------------

    def cut(self) -> None:
        """Close every connection and the listening socket: new connections are refused."""
        with self._lock:
            listener, self._listener = self._listener, None
            self._forwarding = False
        if listener is not None:
            # shutdown() first: close() alone leaves a socket listening while the accept
            # thread still blocks on it
            listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self._drop_all()

    def blackhole(self) -> None:
        """Keep every connection open and forward nothing, as a dead network does: new
        connects hang in the handshake, statements on open ones wait for an answer."""
        with self._lock:
            self._forwarding = False
        if self._listener is None:
            self._listen()

    def restore(self) -> None:
        """Forward again, on the same port. Connections held through a blackhole lost bytes,
        so they are closed: the client reconnects, as it must after any outage."""
        self._drop_all()
        with self._lock:
            self._forwarding = True
        if self._listener is None:
            self._listen()

    def close(self) -> None:
        self.cut()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------------

    def _listen(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed by cut()
            with self._lock:
                forwarding = self._forwarding
                self._sockets.add(client)
            if not forwarding:
                continue  # blackhole: hold the connection open, never answer
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                self._close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.add(upstream)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            with self._lock:
                forwarding = self._forwarding
            if not data:
                self._close(source)
                self._close(sink)
                return
            if not forwarding:
                continue  # blackhole: swallow what is sent
            try:
                sink.sendall(data)
            except OSError:
                self._close(source)
                self._close(sink)
                return

    def _drop_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
        with contextlib.suppress(OSError):  # already closed by the other side
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
