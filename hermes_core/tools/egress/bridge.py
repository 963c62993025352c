"""The sandbox's end of the egress proxy: run inside the sandbox with its own python3.

Usage: python3 bridge.py SOCKET PORT WATCHED_PID

Listens on 127.0.0.1:PORT (the sandbox's own loopback) and relays each connection, byte for
byte, to the proxy's Unix socket SOCKET. It binds first and then forks a server and exits, so
whoever started it may connect as soon as it returned. The server leaves once WATCHED_PID (the
command) is gone. Standard library only: it must run on any system python3 (3.8+).
"""

import contextlib
import os
import socket
import sys
import threading
import time

CHUNK = 65536


def relay(source: socket.socket, sink: socket.socket) -> None:
    """Copy until ``source`` ends, then half-close ``sink`` so the other side sees the end."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def serve_one(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=relay, args=(upstream, client), daemon=True)
    back.start()
    relay(client, upstream)
    back.join()
    client.close()
    upstream.close()


def watch(pid: int) -> None:
    """Leave when the command is gone (the sandbox's PID namespace usually ends us first)."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            pass
        time.sleep(0.5)


def main() -> int:
    path, port, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if not os.path.exists(path):
        sys.stderr.write(f"hermes bridge: no proxy socket at {path}\n")
        return 1
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    if os.fork() != 0:
        return 0  # listening: the command may start
    # The server must not hold the command's output open (its reader waits for the end).
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    threading.Thread(target=watch, args=(pid,), daemon=True).start()
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve_one, args=(client, path), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
