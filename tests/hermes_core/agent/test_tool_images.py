"""Images tools return, in real runs against the simulator in every API mode: sent to the
model in the call after the tool, a placeholder afterwards, never to a model that cannot see;
``view_image`` and ``vision_analyze`` end to end."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from hermes_core.agent import Agent
from hermes_core.providers.base import ApiMode
from hermes_core.providers.fallback import FallbackChain
from hermes_core.tools.images import view_image_tool, vision_analyze_tool
from hermes_core.tools.registry import ToolContext, ToolRegistry
from hermes_core.tools.results import ImagePart, ToolOutput
from server.simulator import Reply, SimulatorServer, Step
from tests.hermes_core.agent.conftest import ProviderFor, call, script, sent
from tests.pictures import PNG

PNG_B64 = base64.b64encode(PNG).decode()


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(description="Draw a chart.")
    async def chart(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput("the sales chart", [ImagePart("image/png", PNG)])

    @registry.tool(description="Look a number up.")
    async def lookup(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "42"

    return registry


def _image_parts(body: dict[str, Any]) -> int:
    """How many image parts a request carried, whatever its protocol."""
    found = 0

    def walk(value: Any) -> None:
        nonlocal found
        if isinstance(value, dict):
            found += value.get("type") in ("image_url", "input_image", "image")
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(body)
    return found


async def test_a_tool_image_is_sent_once_then_replaced_by_a_placeholder(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(
        simulator,
        "charts",
        Step(reply=Reply(tool_calls=[call("chart")])),
        Step(reply=Reply(tool_calls=[call("lookup")])),
        Step(reply=Reply(text="Sales are up.")),
    )
    agent = Agent(provider_for(api_mode, "charts"), tools=_tools())
    result = await agent.run_conversation("How are sales?")
    assert result["final_response"] == "Sales are up."
    # The transcript keeps the image; what is sent is decided per call.
    stored = result["messages"][2]
    assert stored["role"] == "tool"
    assert stored["content"] == [
        {"type": "text", "text": "the sales chart"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
    ]
    first, second, third = sent(simulator, "charts")
    assert _image_parts(first) == 0
    assert _image_parts(second) == 1
    assert PNG_B64 in json.dumps(second)
    assert PNG_B64 not in json.dumps(third)
    assert "[image: image/png, 70 bytes; shown to you when the tool returned it" in json.dumps(
        third
    )


async def test_a_later_turn_does_not_resend_the_image(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(
        simulator,
        "turns",
        Step(reply=Reply(tool_calls=[call("chart")])),
        Step(reply=Reply(text="A chart.")),
        Step(reply=Reply(text="Still a chart.")),
    )
    agent = Agent(provider_for(api_mode, "turns"), tools=_tools())
    first_turn = await agent.run_conversation("Draw it.")
    await agent.run_conversation("And now?", conversation_history=first_turn["messages"])
    *_, later = sent(simulator, "turns")
    assert PNG_B64 not in json.dumps(later)
    assert _image_parts(later) == 0


async def test_view_image_of_a_workspace_png_reaches_the_model_as_an_image(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode, tmp_path: Path
) -> None:
    (tmp_path / "plot.png").write_bytes(PNG)
    script(
        simulator,
        "viewer",
        Step(reply=Reply(tool_calls=[call("view_image", path="plot.png")])),
        Step(reply=Reply(text="A single pixel.")),
    )
    agent = Agent(provider_for(api_mode, "viewer"), tools=ToolRegistry([view_image_tool()]))
    result = await agent.run_conversation("Check the plot.", workspace=tmp_path)
    assert result["final_response"] == "A single pixel."
    _, second = sent(simulator, "viewer")
    assert _image_parts(second) == 1
    assert PNG_B64 in json.dumps(second)
    assert "plot.png (image/png, 70 bytes)" in json.dumps(second)


async def test_a_model_that_cannot_see_asks_the_vision_chain_instead(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(
        simulator,
        "blind-main",
        Step(reply=Reply(tool_calls=[call("chart")])),
        Step(reply=Reply(tool_calls=[call("vision_analyze", question="What trend?")])),
        Step(reply=Reply(text="Sales rise, says the vision model.")),
    )
    script(simulator, "eyes", Step(reply=Reply(text="An upward trend.")))
    vision = FallbackChain([provider_for("anthropic_messages", "eyes", name="eyes")])
    tools = _tools()
    tools.register(vision_analyze_tool(vision))
    main = provider_for(api_mode, "blind-main", vision=False)
    result = await Agent(main, tools=tools).run_conversation("How are sales?")
    assert result["final_response"] == "Sales rise, says the vision model."
    for body in sent(simulator, "blind-main"):
        assert _image_parts(body) == 0
        assert PNG_B64 not in json.dumps(body)
    second = json.dumps(sent(simulator, "blind-main")[1])
    assert "you cannot see images: call vision_analyze with a question" in second
    [asked] = sent(simulator, "eyes")
    assert PNG_B64 in json.dumps(asked)
    assert "What trend?" in json.dumps(asked)
    answer = result["messages"][4]
    assert (answer["role"], answer["content"]) == ("tool", "An upward trend.")
