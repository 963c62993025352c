"""The Chat Completions wire format we serve: what clients send, and how it becomes a run.

Unknown request fields are accepted and ignored (clients send many); known ones are honoured
or refused with a 400 that names them. Sampling hints an agent's several model calls do not
pass on (``seed``, ``top_p``, the penalties, ``logit_bias``) are among the ignored ones, as
OpenAI treats ``seed`` as best effort; what a client would misread if dropped (``n`` above 1,
``logprobs``, audio ``modalities``, the legacy ``functions``) is refused.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from hermes_core.agent import AgentRequest
from hermes_core.messages import Message, ToolCall
from hermes_core.providers.base import ForcedTool, ToolChoice, ToolSchema
from server.errors import APIError
from server.protocol.json_depth import refuse_deep_fields
from server.protocol.openwebui_tasks import is_task_prompt
from server.protocol.output_formats import chat_output_format


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCallIn(_Open):
    name: str
    arguments: str = "{}"


class ToolCallIn(_Open):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ChatMessageIn(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(default=None, pattern=r"^[^\s<|\\/>]+$")
    """Which participant of several said it: kept on user and assistant messages. The pattern
    is OpenAI's as of 2026 (it was ``[a-zA-Z0-9_-]+``): any letters, no white space and none
    of ``<|\\/>``, the characters of a chat template's special tokens."""
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class FunctionDefinitionIn(_Open):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    strict: bool | None = None


class ToolIn(_Open):
    type: Literal["function"]
    function: FunctionDefinitionIn


class StreamOptions(_Open):
    include_usage: StrictBool = False


class ChatCompletionRequest(_Open):
    """``POST /v1/chat/completions``."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    model: str = Field(min_length=1)
    messages: list[ChatMessageIn] = Field(min_length=1)
    # Booleans are strict, as OpenAI's are: "stream": "yes" is a 400, not a stream.
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    reasoning_effort: str | None = None
    tools: list[ToolIn] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    n: int | None = Field(default=None, ge=1)
    response_format: dict[str, Any] | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    stop: str | list[str] | None = None
    """Up to 4 sequences: the answer the client is shown ends before the first of them (see
    ``server/views/chat_stop.py``; the run goes on to its end, and its transcript keeps the
    whole answer)."""
    logprobs: StrictBool | None = None
    """Refused when true: an agent's answer spans several model calls (and tool results),
    so it has no log probabilities to give."""
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    """Refused above 0, as ``logprobs``."""
    modalities: list[str] | None = None
    """``["text"]`` only: the agent answers in text, so asking for ``audio`` is refused
    rather than answered without the audio the client waits for."""
    functions: list[Any] | None = None
    """The deprecated form of ``tools``: refused unless empty, so that a client using it
    learns to send ``tools`` instead of getting answers from a model that never saw its
    functions."""
    function_call: str | dict[str, Any] | None = None
    """The deprecated form of ``tool_choice``: refused when it names a function."""

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int | None) -> int | None:
        if value is not None and value != 1:
            raise APIError(400, "n must be 1: an agent run produces one answer.", param="n")
        return value

    @field_validator("stop")
    @classmethod
    def _four_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise APIError(400, "stop takes at most 4 sequences.", param="stop")
        return value

    @field_validator("modalities")
    @classmethod
    def _text_only(cls, value: list[str] | None) -> list[str] | None:
        if value and any(modality != "text" for modality in value):
            raise APIError(
                400,
                "Only the text modality is supported: the agent answers in text.",
                param="modalities",
                code="unsupported_parameter",
            )
        return value

    @field_validator("functions", "function_call")
    @classmethod
    def _no_legacy_functions(cls, value: Any, info: ValidationInfo) -> Any:
        # Empty functions, or a function_call of "auto" or "none", ask for nothing.
        if value and not isinstance(value, str):
            modern = "tools" if info.field_name == "functions" else "tool_choice"
            raise APIError(
                400,
                f"{info.field_name} is the deprecated form of {modern}, which this server "
                f"supports: send {modern} instead.",
                param=info.field_name,
                code="unsupported_parameter",
            )
        return value

    @field_validator("stream_options")
    @classmethod
    def _only_with_a_stream(
        cls, value: StreamOptions | None, info: ValidationInfo
    ) -> StreamOptions | None:
        if value is not None and not info.data.get("stream"):
            raise APIError(
                400, "stream_options is only allowed when stream is true.", param="stream_options"
            )
        return value

    @model_validator(mode="after")
    def _no_logprobs(self) -> ChatCompletionRequest:
        if self.logprobs or self.top_logprobs:
            raise APIError(
                400,
                "Unsupported parameter: 'logprobs' — an agent's answer spans several model "
                "calls and tool results, so it has no log probabilities.",
                param="logprobs",
                code="unsupported_parameter",
            )
        return self

    @model_validator(mode="after")
    def _shallow(self) -> ChatCompletionRequest:
        # APIError passes through pydantic untouched: the 400 names the param.
        refuse_deep_fields(self, ("tools", "tool_choice", "response_format"))
        return self

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        """The non-empty ``stop`` sequences (an empty one would cut the whole answer)."""
        stop = [self.stop] if isinstance(self.stop, str) else self.stop or []
        return tuple(sequence for sequence in stop if sequence)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def is_openwebui_task(self) -> bool:
        """Open WebUI's side requests (title, tags, follow-ups), by their prompt: a
        non-streamed ``### Task:`` prompt that is not the RAG template (see
        :mod:`server.protocol.openwebui_tasks`; a header, where sent, decides instead)."""
        last = self.messages[-1]
        return (
            not self.stream
            and last.role == "user"
            and isinstance(last.content, str)
            and is_task_prompt(last.content)
        )

    def client_tools(self) -> list[ToolSchema]:
        """The client's tools, restricted by an ``allowed_tools`` tool_choice."""
        allowed = self._allowed_names()
        return [
            ToolSchema(
                name=tool.function.name,
                description=tool.function.description,
                parameters=tool.function.parameters,
            )
            for tool in self.tools or ()
            if allowed is None or tool.function.name in allowed
        ]

    def to_agent_request(
        self, *, with_client_tools: bool = True, offer_tools: bool = True, run_id: str | None = None
    ) -> AgentRequest:
        """Split the messages into the client's system layer, the history and the new turn."""
        system_parts: list[str] = []
        conversation: list[Message] = []
        for message in self.messages:
            if message.role in ("system", "developer"):
                text = _text(message.content)
                if text and not conversation:
                    system_parts.append(text)
                elif text:
                    # Mid-conversation it applies from here on: it keeps its place.
                    conversation.append({"role": "system", "content": text})
                continue
            conversation.append(_to_internal(message))
        user_message: str | list[dict[str, Any]] | None = None
        user_name: str | None = None
        if conversation and conversation[-1]["role"] == "user":
            last = conversation.pop()
            user_message = last.get("content") or ""
            user_name = last.get("name")
        return AgentRequest(
            user_message=user_message,
            user_name=user_name,
            history=conversation,
            system_message="\n\n".join(system_parts) or None,
            client_tools=self.client_tools() if with_client_tools else (),
            tool_choice=self._tool_choice(),
            max_tokens=self.max_completion_tokens or self.max_tokens,
            temperature=self.temperature,
            reasoning_effort=self.reasoning_effort,
            parallel_tool_calls=self.parallel_tool_calls,
            output_format=chat_output_format(self.response_format),
            stream_model_replies=self.stream,
            offer_tools=offer_tools,
            run_id=run_id,
        )

    def _tool_choice(self) -> ToolChoice:
        choice = self.tool_choice
        if choice is None or choice == "auto":
            return "auto"
        if choice in ("none", "required"):
            return choice  # type: ignore[return-value]
        if isinstance(choice, dict) and choice.get("type") == "function":
            name = (choice.get("function") or {}).get("name")
            self._check_declared([name])
            if isinstance(name, str) and name:
                return ForcedTool(name=name)
        if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
            mode = (choice.get("allowed_tools") or {}).get("mode")
            if self._allowed_names() is not None and mode in ("auto", "required"):
                return "auto" if mode == "auto" else "required"
        raise APIError(400, f"Invalid tool_choice: {json.dumps(choice)}", param="tool_choice")

    def _allowed_names(self) -> frozenset[str] | None:
        """The tools an ``allowed_tools`` tool_choice permits (None for any other choice):
        ``{"allowed_tools": {"mode", "tools": [{"type": "function", "function": {"name"}}]}}``.
        """
        choice = self.tool_choice
        if not (isinstance(choice, dict) and choice.get("type") == "allowed_tools"):
            return None
        tools = (choice.get("allowed_tools") or {}).get("tools")
        names = [
            (tool.get("function") or {}).get("name")
            for tool in tools or ()
            if isinstance(tool, dict) and tool.get("type") == "function"
        ]
        if not isinstance(tools, list) or not names or len(names) != len(tools):
            raise APIError(400, f"Invalid tool_choice: {json.dumps(choice)}", param="tool_choice")
        self._check_declared(names)
        return frozenset(name for name in names if isinstance(name, str))

    def _check_declared(self, names: list[Any]) -> None:
        """As "required" does, a client that declared tools names its own: any other name
        the upstream refuses, which the client would see as a 502."""
        declared = {tool.function.name for tool in self.tools or ()}
        for name in names:
            if declared and name not in declared:
                raise APIError(
                    400,
                    f"tool_choice names the function {json.dumps(name)}, which is not one "
                    "of the request's tools.",
                    param="tool_choice",
                )


def _text(content: str | list[dict[str, Any]] | None) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")


def _to_internal(message: ChatMessageIn) -> Message:
    out: Message = {"role": message.role}  # type: ignore[typeddict-item]
    refusal = (message.model_extra or {}).get("refusal")
    if message.content is None and isinstance(refusal, str):
        out["content"] = refusal  # a refused turn, as the server keeps it
    else:
        out["content"] = message.content if message.content is not None else ""
    if message.tool_calls:
        calls: list[ToolCall] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in message.tool_calls
        ]
        out["tool_calls"] = calls
    if message.name is not None and message.role in ("user", "assistant"):
        out["name"] = message.name
    if message.role == "tool":
        if not message.tool_call_id:
            raise APIError(400, "A tool message needs a tool_call_id.", param="messages")
        out["tool_call_id"] = message.tool_call_id
    return out
