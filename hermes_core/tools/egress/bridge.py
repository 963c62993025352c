"""The sandbox's end of the egress proxy: run inside the sandbox with its own python3.

Usage: python3 bridge.py SOCKET PORT WATCHED_PID

Listens on 127.0.0.1:PORT (the sandbox's own loopback) and relays each connection, byte for
byte, to the proxy's Unix socket SOCKET. It binds first and then forks a server and exits, so
whoever started it may connect as soon as it returned. The server leaves once WATCHED_PID (the
command) is gone. Standard library only: it must run on any system python3 (3.8+).
"""

import contextlib
import os
import select
import socket
import sys
import threading

CHUNK = 65536
WATCH_SECONDS = 0.5


def serve_one(client: socket.socket, path: str) -> None:
    """Relay one connection both ways in one thread (threads count as processes against the
    sandbox's limit), passing each side's end on as a half-close."""
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    peers = {client: upstream, upstream: client}
    reading = [client, upstream]
    try:
        upstream.connect(path)
        while reading:
            ready, _, _ = select.select(reading, [], [])
            for source in ready:
                data = source.recv(CHUNK)
                if data:
                    peers[source].sendall(data)
                else:
                    reading.remove(source)
                    with contextlib.suppress(OSError):
                        peers[source].shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        client.close()
        upstream.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


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
    # Leave when the command is gone (the sandbox's PID namespace usually ends us first).
    listener.settimeout(WATCH_SECONDS)
    while alive(pid):
        try:
            client, _ = listener.accept()
        except OSError:  # the timeout (socket.timeout before 3.10), or a failed accept
            continue
        client.setblocking(True)
        threading.Thread(target=serve_one, args=(client, path), daemon=True).start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
