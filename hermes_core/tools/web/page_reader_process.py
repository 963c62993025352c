"""The child process that turns fetched HTML into Markdown (run by path, never imported).

trafilatura can spend seconds of CPU and a lot of memory on a hostile page, so it runs here,
in a process the server can kill, not in the server (see ``page_readers.py``). This file
imports nothing of hermes: it is started with ``python -I <this file>``, with an environment
that holds no secrets.

Its arguments: the bytes of address space it may use, and the server's process id. One page
at a time, on stdin: a JSON line ``{"url", "charset", "size"}`` followed by ``size`` bytes of
HTML. One answer a page, on stdout: a JSON line ``{"title", "text"}``, or ``{"error"}`` when
the page could not be read (memory ran out, the parser failed).
"""

import ctypes
import errno
import json
import os
import platform
import resource
import signal
import struct
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
# Per machine: AUDIT_ARCH_*, then the system calls refused: socket, execve, execveat, ptrace,
# process_vm_readv, process_vm_writev, pidfd_getfd, and io_uring_setup (its rings open sockets
# and connect without the calls above).
_REFUSED_CALLS = {
    "x86_64": (0xC000003E, (41, 59, 322, 101, 310, 311, 438, 425)),
    "aarch64": (0xC00000B7, (198, 221, 281, 117, 270, 271, 438, 425)),
}


def readable_html(html: str, url: str) -> tuple[str, str]:
    """The page's title and its main content as Markdown (the whole text when extraction
    finds no main content, e.g. a page that is all navigation)."""
    import trafilatura

    metadata = trafilatura.extract_metadata(html, default_url=url)
    title = (metadata.title if metadata is not None else None) or ""
    text = trafilatura.extract(
        html,
        url=url,
        output_format="markdown",
        include_links=True,
        include_tables=True,
        favor_recall=True,
    )
    if not text:
        text = trafilatura.html2txt(html) or ""
    return title, text


def end_with_the_server(server: int) -> None:
    """Killed by the kernel when the server ends, however it ends: a SIGKILLed server closes
    the pipe, but a reader busy on a page would only notice once done with it.

    The kernel sends the signal when the *thread* that started this process ends: the server
    starts readers only on the threads of its reading pool, which last as long as it does."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server:  # it ended before the signal was asked for
        sys.exit(0)


def no_network_nor_programs() -> None:
    """A seccomp filter refusing (EPERM) what a page exploiting the parser would do next, as
    the server's user: open a socket, run a program, or reach into the server's memory (its
    parent, so ptrace is within reach where Yama allows it). Classic BPF over ``struct
    seccomp_data`` (``nr`` at offset 0, ``arch`` at 4), like ``hermes_core/tools/seccomp.py``
    assembles for the sandbox; another ABI's calls are refused whole, as they would dodge it.
    A machine with no numbers here goes without."""
    if platform.machine() not in _REFUSED_CALLS:
        return
    arch, refused = _REFUSED_CALLS[platform.machine()]
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    # Jump offsets count instructions after the jump; the last instruction refuses.
    refuse_at = 4 + len(refused) + 1
    program = [
        (load, 0, 0, 4),  # arch
        (jeq, 0, refuse_at - 2, arch),
        (load, 0, 0, 0),  # nr
        (jge, refuse_at - 4, 0, 0x40000000),  # x32 numbering
        *((jeq, refuse_at - 5 - n, 0, call) for n, call in enumerate(refused)),
        (ret, 0, 0, 0x7FFF0000),  # allow
        (ret, 0, 0, 0x00050000 | errno.EPERM),
    ]
    code = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *op) for op in program))

    class SockFprog(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    _prctl(_PR_SET_NO_NEW_PRIVS, 1)  # what an unprivileged process must promise first
    fprog = SockFprog(len(program), ctypes.addressof(code))
    _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog))


def _prctl(option: int, value: int, *rest: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    arguments = [ctypes.c_ulong(argument) for argument in (value, *rest, 0, 0, 0)][:4]
    if libc.prctl(ctypes.c_int(option), *arguments) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl({option}): {os.strerror(error)}")


_LANDLOCK_CREATE_RULESET, _LANDLOCK_RESTRICT_SELF = 444, 446  # the same on every machine
_LANDLOCK_ABI_VERSION = 1
_LANDLOCK_FS_RIGHTS = {1: 13, 2: 14, 3: 15, 4: 15}
"""How many of the filesystem access rights (bits from 0) each Landlock ABI knows; 16 from
ABI 5 on (device ioctls)."""
WARM_UP_PAGE = (
    "<html><head><title>Warm</title></head><body><nav><a href='/'>Home</a></nav><article>"
    + "<h1>Warm up</h1><p>A paragraph of <a href='/x'>text</a>, a <b>table</b>:</p>"
    + "<table><tr><td>1</td></tr></table><ul><li>and a list</li></ul>" * 3
    + "</article></body></html>"
)
"""Read once before the limits: whatever trafilatura loads on its first page (modules, data
files) is loaded while files can still be opened."""


def no_files() -> None:
    """Open no file from here on (Landlock: a ruleset that handles every filesystem right and
    allows none): a page exploiting the parser cannot read what the server's user may (the
    data directory, the configuration, the server's ``/proc`` entries). Pipes already open stay
    usable. A kernel without Landlock (before 5.13, or not enabled) goes without."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), _LANDLOCK_ABI_VERSION)
    if abi < 1:
        return
    handled = ctypes.c_uint64((1 << _LANDLOCK_FS_RIGHTS.get(abi, 16)) - 1)
    ruleset = libc.syscall(
        _LANDLOCK_CREATE_RULESET, ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"landlock_create_ruleset: {os.strerror(error)}")
    try:
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)  # what an unprivileged process must promise first
        if libc.syscall(_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"landlock_restrict_self: {os.strerror(error)}")
    finally:
        os.close(ruleset)


def decoded(html: bytes, charset: str) -> str:
    """The page's text; as UTF-8 when its charset is a codec of no text Python knows
    ("base64", "rot13", "undefined"…: a page may declare any of them)."""
    try:
        return html.decode(charset, errors="replace")
    except (LookupError, UnicodeError, OSError):  # OSError: a codec not loaded before no_files
        return html.decode("utf-8", errors="replace")


def confine(memory_bytes: int) -> None:
    """Limits set before the first page is read (the imports they would hinder are done)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # writes no files
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Behind the server's requests: on a busy machine (bench/page_reading.py --busy 2) two
    # readers at nice 19 as SCHED_BATCH (never preempting a waking task) left the server's
    # loop 84-97 % of its turns, as SCHED_IDLE did (82-97 %); but SCHED_IDLE starved the pages
    # themselves on cores kept busy (a test batch took 120 s, one page its whole limit), where
    # nice 19's small share still reads them (85 s, every page read).
    os.nice(19)
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    no_files()
    no_network_nor_programs()


def serve(memory_bytes: int, server: int) -> None:
    end_with_the_server(server)
    readable_html(WARM_UP_PAGE, "http://localhost/")  # trafilatura loaded: ~0.3 s, once
    confine(memory_bytes)
    pages, answers = sys.stdin.buffer, sys.stdout
    while True:
        head = pages.readline()
        if not head:
            return  # the server closed the pipe (or is gone)
        request = json.loads(head)
        html = decoded(pages.read(request["size"]), request["charset"])
        try:
            title, text = readable_html(html, request["url"])
            answer: dict[str, str] = {"title": title, "text": text}
        except MemoryError:
            answer = {"error": f"it needed more than {memory_bytes // 1024**2} MB to read"}
        except Exception as error:  # a parser failure is the page's, reported for the model
            answer = {"error": f"its HTML could not be read ({type(error).__name__})"}
        del html
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve(memory_bytes=int(sys.argv[1]), server=int(sys.argv[2]))
