"""The shapes of ``/v1/responses``: the Response object, its output items, stream events,
input item lists and compactions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from server.protocol.schemas.common import (
    ErrorBody,
    HermesSummary,
    InputTokensDetails,
    Omittable,
    Open,
    OutputTokensDetails,
    Shape,
)

# --- Responses: output items ----------------------------------------------------------------------

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputText(Open):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: list[Any]


class SummaryText(Open):
    type: Literal["summary_text"]
    text: str


class Refusal(Open):
    """The model declined to answer (instead of ``output_text``)."""

    type: Literal["refusal"]
    refusal: str


class InputText(Open):
    type: Literal["input_text"]
    text: str


class MessageItem(Open):
    """Model text: the answer."""

    type: Literal["message"]
    id: str
    role: Literal["assistant"]
    status: ItemStatus
    content: list[Annotated[OutputText | Refusal, Field(discriminator="type")]]


class ReasoningItem(Open):
    """Model reasoning, and one summary line per server tool step, status change or fallback."""

    type: Literal["reasoning"]
    id: str
    status: ItemStatus
    summary: list[SummaryText]


class FunctionCallItem(Open):
    """A call of a client-declared tool (or, in Open WebUI mode, a server tool's card)."""

    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    """The arguments as a JSON string."""
    status: ItemStatus | Literal["rejected", "failed"]
    """Open WebUI mode adds two that Open WebUI draws (and sends back as input, taken as
    any other): ``rejected``, a server call the user denied (it did not run); ``failed``, a
    ``shell`` / ``code`` command that exited non-zero, was killed or timed out (the item is done
    a second time so, at its index, when the command ends)."""


class FunctionCallOutputItem(Open):
    """A server tool's output (Open WebUI mode only)."""

    type: Literal["function_call_output"]
    id: str
    call_id: str
    output: list[InputText]
    status: ItemStatus


class McpApprovalRequestItem(Open):
    """A server tool call waiting for a person's approval (the shape OpenAI uses for its MCP
    tool): answer with an ``mcp_approval_response`` input item on the next request."""

    type: Literal["mcp_approval_request"]
    id: str
    """The approval id: what ``approval_request_id`` names."""
    name: str
    """The tool."""
    arguments: str
    """The call's arguments as a JSON string."""
    server_label: Literal["hermes"]


class WebSearchCallItem(Open):
    """A search (``web_search``) or a page read (``web_fetch``) by the agent, when the request
    named the hosted ``web_search`` tool (else: a progress line in a reasoning item)."""

    type: Literal["web_search_call"]
    id: str
    status: Literal["in_progress", "searching", "completed", "failed", "incomplete"]
    action: dict[str, Any]
    """``{"type": "search", "query", "sources"?}`` (``sources``, ``[{"type": "url", "url"}]``,
    when ``include`` has ``web_search_call.action.sources``) or ``{"type": "open_page",
    "url"}``."""


class CodeInterpreterCallItem(Open):
    """A Python run by the agent's ``code`` tool, when the request named the hosted
    ``code_interpreter`` tool."""

    type: Literal["code_interpreter_call"]
    id: str
    status: Literal["in_progress", "interpreting", "completed", "failed", "incomplete"]
    code: str | None
    container_id: str
    """The conversation's container (``/v1/containers``): the files the code wrote are there."""
    outputs: list[dict[str, Any]] | None
    """``[{"type": "logs", "logs"}]``, what the run printed, then ``{"type": "image", "url"}``
    per image it saved (the container file's content, or a ``data:`` URL when there is no
    container); null until it ended."""


class ShellCallItem(Open):
    """A command by the agent's ``shell`` tool, when the request named the hosted ``shell``
    tool; its output follows as a ``shell_call_output`` item."""

    type: Literal["shell_call"]
    id: str
    call_id: str
    action: dict[str, Any]
    """``{"commands": [command], "timeout_ms", "max_output_length"}``."""
    status: ItemStatus
    environment: dict[str, Any] | None
    """``{"type": "container_reference", "container_id"}``: the conversation's container."""


class ShellCallOutputItem(Open):
    """What a ``shell_call``'s command printed, and how it ended."""

    type: Literal["shell_call_output"]
    id: str
    call_id: str
    output: list[dict[str, Any]]
    """``[{"stdout", "stderr", "outcome": {"type": "exit", "exit_code"} | {"type":
    "timeout"}}]``."""
    max_output_length: int | None
    status: ItemStatus


class ImageGenerationCallItem(Open):
    """An image made by the agent's ``generate_image`` tool (the profile's image providers),
    when the request named the hosted ``image_generation`` tool."""

    type: Literal["image_generation_call"]
    id: str
    status: Literal["in_progress", "generating", "completed", "failed"]
    result: str | None
    """The final image, base64; null until it is made (or when it failed)."""


OutputItem = Annotated[
    MessageItem
    | ReasoningItem
    | FunctionCallItem
    | FunctionCallOutputItem
    | McpApprovalRequestItem
    | WebSearchCallItem
    | CodeInterpreterCallItem
    | ShellCallItem
    | ShellCallOutputItem
    | ImageGenerationCallItem,
    Field(discriminator="type"),
]


# --- Responses: the Response object ---------------------------------------------------------------


class ResponseUsage(Shape):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(Shape):
    reason: Literal["max_output_tokens", "max_messages"]
    """``max_messages`` when the iteration budget ran out (``hermes.exit_reason`` says so)."""


class ResponseError(Shape):
    code: str
    message: str


class FunctionTool(Shape):
    """A client-declared function tool, echoed (the agent's own tools are never listed)."""

    type: Literal["function"]
    name: str
    description: str | None
    parameters: dict[str, Any] | None
    strict: bool | None


class ShellTool(Open):
    """The hosted ``shell`` tool, echoed as the request gave it. The agent's own shell runs
    the commands (in the conversation's sandbox); the skills its ``container_auto``
    environment lists are attached to that response's run only, each readable at
    ``/skills/<name>``."""

    type: Literal["shell"]
    environment: Omittable[dict[str, Any] | None] = None
    """``null`` or ``{"type": "container_auto", "skills": [...]}``: ``skill_reference``
    (``skill_id``, ``version``) or ``inline`` (``name``, ``description``, ``source``: a
    base64 zip) skills."""


class WebSearchTool(Open):
    """The hosted ``web_search`` tool (or ``web_search_preview``, or a dated name), echoed:
    the agent's ``web`` toolset serves it (a profile without it, or a server without a search
    backend, refuses it). ``filters.allowed_domains`` keeps searches and page reads to those
    domains; ``user_location`` and ``search_context_size`` are accepted and ignored."""

    type: Literal[
        "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11"
    ]


class CodeInterpreterTool(Open):
    """The hosted ``code_interpreter`` tool, echoed: the agent's ``code`` tool serves it, in
    the conversation's container. ``container`` is ``"auto"``, ``{"type": "auto"}`` or a
    container id of the key's (another is a 400): the conversation's own container in any
    case."""

    type: Literal["code_interpreter"]
    container: str | dict[str, Any]


class ImageGenerationTool(Open):
    """The hosted ``image_generation`` tool, echoed: the agent's ``generate_image`` tool serves
    it with the profile's image providers (a profile without ``image_providers`` refuses it).
    ``size``, ``quality``, ``output_format``, ``background`` and ``partial_images`` (0-3,
    streamed as ``response.image_generation_call.partial_image`` events) are honoured;
    ``model`` and the rest are the configured providers' to decide."""

    type: Literal["image_generation"]


class TextFormat(Shape):
    type: Literal["text"]


class JsonObjectFormat(Shape):
    type: Literal["json_object"]


class JsonSchemaFormat(Open):
    """A structured answer: the final ``output_text`` is JSON matching ``schema``."""

    type: Literal["json_schema"]
    name: str
    schema_: dict[str, Any] = Field(alias="schema")
    strict: Omittable[bool | None] = None
    description: Omittable[str | None] = None


class TextConfig(Open):
    format: Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]


class ReasoningConfig(Shape):
    effort: str | None
    summary: str | None


class ConversationReference(Shape):
    """The conversation a response was appended to."""

    id: str


class ResponseObject(Open):
    """A Response: every one of Open Responses' 31 keys, echoing the request, plus ``hermes``
    once the run has ended. ``status`` is ``cancelled`` for a stopped run."""

    id: str
    object: Literal["response"]
    created_at: int
    completed_at: int | None
    status: Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
    incomplete_details: IncompleteDetails | None
    model: str
    previous_response_id: str | None
    instructions: str | None
    output: list[OutputItem]
    error: ResponseError | None
    tools: list[
        Annotated[
            FunctionTool | ShellTool | WebSearchTool | CodeInterpreterTool | ImageGenerationTool,
            Field(discriminator="type"),
        ]
    ]
    tool_choice: str | dict[str, Any]
    truncation: Literal["auto", "disabled"]
    parallel_tool_calls: bool
    text: TextConfig
    top_p: float
    presence_penalty: float
    frequency_penalty: float
    temperature: float
    top_logprobs: int
    reasoning: ReasoningConfig | None
    usage: ResponseUsage | None
    """Null until the run has ended."""
    max_output_tokens: int | None
    max_tool_calls: int | None
    store: bool
    background: bool
    service_tier: str
    metadata: dict[str, str]
    safety_identifier: str | None
    prompt_cache_key: str | None
    user: Omittable[str] = None
    """Echoed when the request had one."""
    conversation: Omittable[ConversationReference] = None
    """The conversation (``/v1/conversations``) the response belongs to, when it has one."""
    hermes: Omittable[HermesSummary] = None
    """Once the run has ended."""


# --- Responses: stream events ---------------------------------------------------------------------

ResponseEventType = Literal[
    "response.created",
    "response.queued",
    "response.in_progress",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.refusal.delta",
    "response.refusal.done",
    "response.web_search_call.in_progress",
    "response.web_search_call.searching",
    "response.web_search_call.completed",
    "response.code_interpreter_call.in_progress",
    "response.code_interpreter_call_code.delta",
    "response.code_interpreter_call_code.done",
    "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call.completed",
    "response.shell_call_command.added",
    "response.shell_call_command.delta",
    "response.shell_call_command.done",
    "response.shell_call_output_content.delta",
    "response.shell_call_output_content.done",
    "response.image_generation_call.in_progress",
    "response.image_generation_call.generating",
    "response.image_generation_call.partial_image",
    "response.image_generation_call.completed",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
    "hermes:tool_progress",
    "hermes:approval",
    "hermes:status",
]


class ResponseStreamEvent(Open):
    """One event of a Responses stream, sent as ``event: <type>`` + ``data: <json>``.

    Canonical order: ``response.created`` (sequence number 0), then ``response.in_progress`` (or
    ``response.queued`` first, for a background response); then, item after item (``output_index``
    its position in ``response.output``): ``response.output_item.added``, its parts —
    ``content_part.added`` → ``output_text.delta``* → ``output_text.done`` → ``content_part.done``
    for a message, ``reasoning_summary_part.added`` → ``reasoning_summary_text.delta``* → ``…done``
    → ``reasoning_summary_part.done`` for reasoning, ``function_call_arguments.delta`` →
    ``…done`` for a function call — and ``response.output_item.done``; then exactly one terminal
    event, ``response.completed``, ``response.incomplete`` or ``response.failed`` (after an
    ``error`` event); then ``data: [DONE]``. ``: keep-alive`` comments fill quiet spells.
    ``hermes:tool_progress`` events (only with ``X-Hermes-Progress: events``) carry the fields
    of ``ToolProgress`` at the top level; ``hermes:status`` events (only in Open WebUI mode)
    carry a status line as Open WebUI's ``event``.
    """

    type: ResponseEventType
    sequence_number: int
    """0, 1, 2, … without gaps; ``starting_after`` resumes after one."""
    response: Omittable[ResponseObject] = None
    """``response.created`` / ``.queued`` / ``.in_progress`` and the terminal events."""
    output_index: Omittable[int] = None
    item_id: Omittable[str] = None
    item: Omittable[OutputItem] = None
    """``output_item.added`` (in progress) and ``output_item.done`` (final)."""
    content_index: Omittable[int] = None
    summary_index: Omittable[int] = None
    part: Omittable[Annotated[OutputText | SummaryText | Refusal, Field(discriminator="type")]] = (
        None
    )
    delta: Omittable[str | dict[str, Any]] = None
    """Text; on ``shell_call_output_content.delta``, ``{"stdout", "stderr"}``."""
    text: Omittable[str] = None
    """The part's whole text, on ``….done``."""
    refusal: Omittable[str] = None
    """The whole refusal, on ``response.refusal.done``."""
    arguments: Omittable[str | dict[str, Any]] = None
    """The whole JSON arguments string on ``function_call_arguments.done``; the parsed object
    on ``hermes:tool_progress``."""
    logprobs: Omittable[list[Any]] = None
    command_index: Omittable[int] = None
    command: Omittable[str] = None
    """``shell_call_command.added`` / ``.done``: the command (so far)."""
    output: Omittable[list[dict[str, Any]]] = None
    """``shell_call_output_content.done``: the ``shell_call_output`` item's ``output``."""
    code: Omittable[str] = None
    """``error`` events: OpenAI's flat fields, and Open Responses' nested ``error``;
    ``code_interpreter_call_code.done``: the whole code."""
    message: Omittable[str] = None
    param: Omittable[str | None] = None
    error: Omittable[ErrorBody | str | None] = None
    """The error on ``error`` events; the tool's error on ``hermes:tool_progress``."""
    event: Omittable[dict[str, Any]] = None
    """On ``hermes:status``: ``{"type": "status", "data": {"description", "done"}}``."""


class ResponseDeleted(Shape):
    id: str
    object: Literal["response.deleted"]
    deleted: bool


class InputItem(Open):
    """An input item as the request gave it, with its ``type`` and ``id`` filled in (and
    what a message or function call item left out that OpenAI's list shows: a ``completed``
    ``status``, an image's ``detail`` ``auto``, an answer's empty ``annotations``)."""

    type: str
    id: str


class InputItemList(Shape):
    object: Literal["list"]
    data: list[InputItem]
    first_id: str | None
    last_id: str | None
    has_more: bool


class CompactionItem(Shape):
    """Feed it back as an input item: it stands for the whole conversation so far."""

    type: Literal["compaction"]
    id: str
    encrypted_content: str
    """The compressed conversation (not encrypted: the client may read it)."""


class ResponseCompaction(Shape):
    id: str
    object: Literal["response.compaction"]
    created_at: int
    output: list[CompactionItem]
    usage: ResponseUsage
