"""The images a hosted ``code_interpreter`` call's code saves are the call's ``image`` outputs,
after its logs, whose URL (the file's content in the conversation's container) serves the
image to the key; the same in the non-streamed response, the stream's ``output_item.done`` and
``response.completed``, and the stored response. Other files are announced as before.

The server and its scripting are the hosted tools tests' (``test_responses_hosted_tools``); the
code runs in the real sandbox: most tests write a PNG's bytes themselves, one draws a real chart
with the sandbox's matplotlib.
"""

from __future__ import annotations

import base64
import concurrent.futures
import os
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from hermes_core.events import CallImage
from server.files.call_images import (
    MAX_IMAGE_BYTES,
    MAX_INLINE_BYTES,
    MAX_INLINE_TOTAL,
    images_since,
)
from server.files.workspace_changes import snapshot
from server.simulator import SimulatorServer
from tests.server.served import answer, call, http_client
from tests.server.test_responses_hosted_tools import (  # noqa: F401 (fixtures used by name)
    CODE_INTERPRETER,
    KEY,
    MODEL,
    HostedServer,
    client,
    hosted_server,
    hosted_site,
    needs_sandbox,
    of_type,
    script,
    streamed,
)


def png(width: int = 4, height: int = 3) -> bytes:
    """A valid PNG: grey pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


CHART = png()


def saving(name: str, data: bytes, said: str = "saved") -> str:
    """Code that saves ``data`` as ``name`` and says so."""
    return f"open({name!r}, 'wb').write(bytes.fromhex({data.hex()!r}))\nprint({said!r})"


def paths(images: list[CallImage]) -> list[str]:
    return [image.path for image in images]


def outputs(item: Any) -> list[tuple[str, str]]:
    """A code_interpreter_call's outputs as (type, logs or URL)."""
    return [(o.type, o.logs.strip() if o.type == "logs" else o.url) for o in item.outputs or ()]


async def fetched(server: HostedServer, url: str) -> bytes:
    async with http_client(server.base_url, KEY) as http:
        response = await http.get(url)
    assert response.status_code == 200, response.text
    return response.content


# --- over HTTP, the real sandbox ----------------------------------------------------------------


@pytest.mark.slow
@needs_sandbox
async def test_a_saved_png_is_an_image_output_whose_url_serves_its_bytes(
    client: AsyncOpenAI,  # noqa: F811 (the fixture imported above)
    simulator: SimulatorServer,
    hosted_server: HostedServer,  # noqa: F811
) -> None:
    script(simulator, call("code", code=saving("chart.png", CHART)), answer("Drew chart.png."))
    response = await client.responses.create(
        model=MODEL, input="Draw a chart.", tools=[CODE_INTERPRETER]
    )
    [run] = of_type(response, "code_interpreter_call")
    [(logs, said), (image, url)] = outputs(run)
    assert (logs, said, image) == ("logs", "saved", "image")
    assert url.startswith(f"{hosted_server.base_url}/v1/containers/{run.container_id}/files/")
    assert await fetched(hosted_server, url) == CHART
    # The file is still announced as a file the answer made.
    [message] = of_type(response, "message")
    cited = [a.filename for part in message.content for a in part.annotations]
    assert cited == ["chart.png"]


MATPLOTLIB_CHART = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.bar(["north", "south"], [3, 5])
plt.title("Sales")
plt.savefig("sales.png")
print("drawn")
"""


@pytest.mark.slow
@needs_sandbox
async def test_a_chart_matplotlib_draws_is_an_image_output_of_its_call(
    client: AsyncOpenAI,  # noqa: F811
    simulator: SimulatorServer,
    hosted_server: HostedServer,  # noqa: F811
) -> None:
    # The design's example: the sandbox's own Python draws a real chart.
    script(simulator, call("code", code=MATPLOTLIB_CHART), answer("Here is the chart."))
    response = await client.responses.create(
        model=MODEL, input="Chart the sales.", tools=[CODE_INTERPRETER]
    )
    [run] = of_type(response, "code_interpreter_call")
    [(logs, said), (image, url)] = outputs(run)
    assert (logs, said, image) == ("logs", "drawn", "image"), said
    chart = await fetched(hosted_server, url)
    assert chart.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(chart) > 5_000  # a drawn figure, not a placeholder


@pytest.mark.slow
@needs_sandbox
async def test_a_call_that_saves_no_image_has_only_its_logs(
    client: AsyncOpenAI,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    script(
        simulator,
        call("code", code=saving("chart.png", CHART)),
        call("code", code=saving("notes.txt", b"not a chart", said="noted")),
        answer("Done."),
    )
    response = await client.responses.create(
        model=MODEL, input="Chart, then notes.", tools=[CODE_INTERPRETER]
    )
    first, second = of_type(response, "code_interpreter_call")
    assert [kind for kind, _ in outputs(first)] == ["logs", "image"]
    assert outputs(second) == [("logs", "noted")]


@pytest.mark.slow
@needs_sandbox
async def test_a_file_named_png_that_is_no_image_is_not_an_image_output(
    client: AsyncOpenAI,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    script(simulator, call("code", code=saving("fake.png", b"plain text")), answer("Done."))
    response = await client.responses.create(
        model=MODEL, input="Write it.", tools=[CODE_INTERPRETER]
    )
    [run] = of_type(response, "code_interpreter_call")
    assert outputs(run) == [("logs", "saved")]


@pytest.mark.slow
@needs_sandbox
async def test_streamed_and_stored_responses_carry_the_same_image_outputs(
    client: AsyncOpenAI,  # noqa: F811
    simulator: SimulatorServer,
    hosted_server: HostedServer,  # noqa: F811
) -> None:
    script(simulator, call("code", code=saving("plot.png", CHART)), answer("Drew plot.png."))
    events, final = await streamed(client, input="Draw a plot.", tools=[CODE_INTERPRETER])
    [run] = of_type(final, "code_interpreter_call")
    [(_, _), (image, url)] = outputs(run)
    assert image == "image"
    [done] = [
        e.item
        for e in events
        if e.type == "response.output_item.done" and e.item.type == "code_interpreter_call"
    ]
    assert outputs(done) == outputs(run)
    stored = await client.responses.retrieve(final.id)
    [kept] = of_type(stored, "code_interpreter_call")
    assert outputs(kept) == outputs(run)
    assert await fetched(hosted_server, url) == CHART


@pytest.mark.slow
@needs_sandbox
async def test_without_a_container_an_image_output_is_a_data_url_of_its_bytes(
    client: AsyncOpenAI,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    script(simulator, call("code", code=saving("chart.png", CHART)), answer("Drew chart.png."))
    response = await client.responses.create(
        model=MODEL, input="Draw a chart.", tools=[CODE_INTERPRETER], store=False
    )
    [run] = of_type(response, "code_interpreter_call")
    [(_, _), (image, url)] = outputs(run)
    assert image == "image"
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix)
    assert base64.b64decode(url.removeprefix(prefix)) == CHART


# --- what a call's images are ------------------------------------------------------------------


def test_only_images_modified_since_the_call_began_are_its_images(tmp_path: Path) -> None:
    (tmp_path / "old.png").write_bytes(CHART)
    old = time.time_ns() - 10**9
    os.utime(tmp_path / "old.png", ns=(old, old))
    began = time.time_ns()
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "new.png").write_bytes(CHART)
    (tmp_path / "data.csv").write_text("a,b\n")
    assert paths(images_since(tmp_path, began)) == ["plots/new.png"]


def test_a_huge_or_unreadable_image_is_left_out(tmp_path: Path) -> None:
    began = time.time_ns()
    with (tmp_path / "huge.png").open("wb") as huge:  # sparse: takes no room
        huge.write(CHART)
        huge.truncate(MAX_IMAGE_BYTES + 1)
    (tmp_path / "locked.png").write_bytes(CHART)
    (tmp_path / "locked.png").chmod(0)
    (tmp_path / "shown.gif").write_bytes(b"GIF89a" + b"\x00" * 20)
    readable = os.access(tmp_path / "locked.png", os.R_OK)  # root reads it all the same
    expected = ["locked.png", "shown.gif"] if readable else ["shown.gif"]
    assert sorted(paths(images_since(tmp_path, began))) == expected


def test_an_image_as_an_earlier_look_saw_it_is_not_a_later_calls(tmp_path: Path) -> None:
    began = time.time_ns()
    (tmp_path / "first.png").write_bytes(CHART)
    seen = snapshot(tmp_path)  # the first call's look
    (tmp_path / "second.png").write_bytes(CHART)
    assert paths(images_since(tmp_path, began, seen)) == ["second.png"]


def test_inlined_images_keep_to_their_caps(tmp_path: Path) -> None:
    began = time.time_ns()
    (tmp_path / "small.png").write_bytes(CHART)
    (tmp_path / "large.png").write_bytes(CHART + b"\x00" * MAX_INLINE_BYTES)
    [small] = images_since(tmp_path, began, inline=True)
    assert (small.path, small.media_type) == ("small.png", "image/png")
    assert base64.b64decode(small.data or "") == CHART
    many = MAX_INLINE_TOTAL // MAX_INLINE_BYTES + 1
    for n in range(many):
        (tmp_path / f"full-{n}.png").write_bytes(CHART + b"\x00" * (MAX_INLINE_BYTES - 100))
    inlined = images_since(tmp_path, began, inline=True)
    assert sum(len(base64.b64decode(i.data or "")) for i in inlined) <= MAX_INLINE_TOTAL
    assert 0 < len([i for i in inlined if i.path.startswith("full-")]) < many


def test_a_fifo_or_a_link_named_as_an_image_is_left_out_and_never_waited_on(
    tmp_path: Path,
) -> None:
    # Code in the sandbox controls what its workspace holds: a FIFO would block a reader for
    # ever, a link could point at the server's own files (a PNG outside the workspace here).
    outside = tmp_path / "outside.png"
    outside.write_bytes(CHART)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    began = time.time_ns()
    os.mkfifo(workspace / "pipe.png")
    (workspace / "link.png").symlink_to(outside)
    (workspace / "real.png").write_bytes(CHART)
    found = _looked_within(5, lambda: images_since(workspace, began, inline=True))
    assert paths(found) == ["real.png"]


def _looked_within(seconds: float, look: Any) -> list[CallImage]:
    """``look()``, failing (instead of hanging the suite) if it blocks."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        result: list[CallImage] = pool.submit(look).result(timeout=seconds)
        return result
    finally:
        pool.shutdown(wait=False)  # a blocked look is left behind, not waited for
