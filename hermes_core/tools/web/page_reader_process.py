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
import json
import os
import resource
import signal
import sys

_PR_SET_PDEATHSIG = 1


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
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != server:  # it ended before the signal was asked for
        sys.exit(0)


def decoded(html: bytes, charset: str) -> str:
    """The page's text; as UTF-8 when its charset is a codec of no text Python knows
    ("base64", "rot13", "undefined"…: a page may declare any of them)."""
    try:
        return html.decode(charset, errors="replace")
    except (LookupError, UnicodeError):
        return html.decode("utf-8", errors="replace")


def confine(memory_bytes: int) -> None:
    """Limits set before the first page is read (the imports they would hinder are done)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # writes no files
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Behind everything else on the machine: at nice 19 alone, two busy readers still took a
    # third of a busy server's turns (bench/page_reading.py --busy 2); as SCHED_IDLE, ~10 %.
    # On cores kept busy by other work a page may then take its whole READ_SECONDS and fail.
    os.nice(19)
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def serve(memory_bytes: int, server: int) -> None:
    end_with_the_server(server)
    import trafilatura  # noqa: F401  (loaded once, before any page: ~0.3 s)

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
