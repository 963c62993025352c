"""The Responses wire format we serve, request side: what clients send to ``POST /v1/responses``,
how its input items become a run, and the Response object every answer starts from.

Unknown request fields are accepted and ignored, as for Chat Completions. Checks of the request
as a whole (tools, tool_choice, conversation, background, text.format) run when the body is
parsed; checks of the input items run in :meth:`ResponseCreateRequest.to_agent_request`. Both
raise :class:`APIError` with the offending ``param``, never a 500. What needs the profile or
the key's store (a ``shell`` tool's skills) is checked when the request is served
(``server/serving/request_skills.py``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    field_validator,
    model_validator,
)

from hermes_core.agent import AgentRequest
from hermes_core.providers.base import ForcedTool, ToolChoice, ToolSchema
from hermes_core.skills.format import MAX_NAME_CHARS, MAX_ZIP_BYTES
from hermes_core.tools.image_generation import IMAGE_TOOL, ImageOptions
from server.errors import APIError
from server.protocol.json_depth import refuse_deep_fields
from server.protocol.openwebui_tasks import is_task_prompt
from server.protocol.output_formats import responses_output_format
from server.protocol.remote_mcp import echo_mcp_tool, remote_mcp_tools
from server.protocol.response_input import (
    Transcript,
    normalised_item,
)

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_METADATA_PAIRS, _METADATA_KEY_CHARS, _METADATA_VALUE_CHARS = 16, 64, 512
_SKILL_ID_CHARS, _SKILL_VERSION_CHARS = 128, 64
SHELL_TOOL = "shell"
"""The agent's own tool that a request's ``shell`` tool stands for (the profile's shell
toolset): the server runs the commands, in the conversation's sandbox."""
WEB_SEARCH_TYPES = frozenset(
    {"web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11"}
)
"""The hosted web search tool's names (its dated versions included): the agent's ``web``
toolset (``web_search``, ``web_fetch``) serves it."""
CODE_INTERPRETER = "code_interpreter"
"""The hosted code interpreter: the agent's ``code`` tool serves it, in the conversation's
container."""
IMAGE_GENERATION = "image_generation"
"""The hosted image generator: the agent's ``generate_image`` tool serves it, with the
profile's image providers (``profiles[].image_providers``)."""
HOSTED_TYPES = frozenset({SHELL_TOOL, CODE_INTERPRETER, IMAGE_GENERATION, *WEB_SEARCH_TYPES})
"""Tool types a request may name without defining them: the server's toolsets run them."""
_UNSERVED_TYPES = {
    "file_search": ("The file_search tool is not supported: this server keeps no vector stores."),
}
MAX_REQUEST_SKILLS = 16
"""Skills one request's ``shell`` tool may attach."""
_T = TypeVar("_T")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ReasoningParams(_Open):
    effort: str | None = None
    """``none`` … ``max``; passed to the agent as its reasoning effort."""
    summary: str | None = None
    """``auto`` / ``concise`` / ``detailed``: echoed; summaries stream whenever there are some."""


class ResponseCreateRequest(_Open):
    """``POST /v1/responses`` (also the body of ``POST /v1/responses/compact``)."""

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] = ""
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    previous_response_id: str | None = None
    # Booleans are strict, as OpenAI's are: "stream": "yes" is a 400, not a stream.
    store: StrictBool = True
    background: StrictBool = False
    stream: StrictBool = False
    metadata: dict[str, str] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_tool_calls: int | None = Field(default=None, ge=0)
    reasoning: ReasoningParams | None = None
    text: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    user: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    include: list[str] | None = None
    stream_options: dict[str, Any] | None = None
    conversation: str | dict[str, Any] | None = None
    """The conversation (``conv_…``, or ``{"id": "conv_…"}``) the response belongs to: its
    input and output items are appended to it. Not with ``previous_response_id``."""

    _items: list[dict[str, Any]] | None = PrivateAttr(default=None)

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > _METADATA_PAIRS:
            raise ValueError(f"metadata holds at most {_METADATA_PAIRS} key-value pairs")
        for key, item in value.items():
            if len(key) > _METADATA_KEY_CHARS:
                raise ValueError(f"metadata keys are at most {_METADATA_KEY_CHARS} characters")
            if len(item) > _METADATA_VALUE_CHARS:
                raise ValueError(f"metadata values are at most {_METADATA_VALUE_CHARS} characters")
        return value

    @model_validator(mode="after")
    def _supported(self) -> ResponseCreateRequest:
        # APIError (not ValueError) passes through pydantic untouched, so the 400 names the
        # exact param; the server's error handler renders it like any other.
        refuse_deep_fields(self, ("tools", "tool_choice", "text", "stream_options", "conversation"))
        self.conversation_id()
        if self.background and not self.store:
            raise APIError(
                400, "A background response must be stored: set store=true.", param="background"
            )
        responses_output_format((self.text or {}).get("format"))
        self.client_tools()
        remote_mcp_tools(self.tools)
        self.shell_tool()
        hosted = self.hosted_tools()
        _tool_choice(self.tool_choice)
        _check_named_functions(self.tool_choice, self.tools)
        forced = _forced_hosted(self.tool_choice)
        if forced is not None and forced not in hosted.types:
            raise APIError(
                400,
                f"tool_choice forces the {forced} tool, but the request has no {forced} tool.",
                param="tool_choice",
            )
        return self

    def conversation_id(self) -> str | None:
        """The id ``conversation`` names (a string or ``{"id": ...}``), checked; None: none."""
        named = self.conversation
        if isinstance(named, dict):
            named = named.get("id")
        if self.conversation is None:
            return None
        if not isinstance(named, str) or not named:
            raise APIError(
                400, "conversation must be a conversation id or {\"id\": ...}.",
                param="conversation",
            )  # fmt: skip
        if self.previous_response_id is not None:
            raise APIError(
                400,
                "Use either conversation or previous_response_id, not both.",
                param="conversation",
            )
        if not self.store:
            raise APIError(
                400, "A response in a conversation is kept in it: set store=true.",
                param="store",
            )  # fmt: skip
        return named

    def input_items(self) -> list[dict[str, Any]]:
        """The input as normalised items, each with an ``id`` (assigned once, then stable).

        This is what ``GET /v1/responses/{id}/input_items`` lists; treat it as read-only.
        """
        if self._items is None:
            raw = self.input
            if isinstance(raw, str):
                raw = [{"type": "message", "role": "user", "content": raw}] if raw else []
            self._items = [normalised_item(item) for item in raw]
        return self._items

    @property
    def is_openwebui_task(self) -> bool:
        """Open WebUI's side requests (title, tags, follow-ups), by their prompt: a
        non-streamed ``### Task:`` prompt that is not the RAG template (see
        :mod:`server.protocol.openwebui_tasks`; a header, where sent, decides instead)."""
        if self.stream or self.background:
            return False
        items = self.input_items()
        if not items or items[-1].get("type") != "message" or items[-1].get("role") != "user":
            return False
        parts = items[-1].get("content")
        if not isinstance(parts, list):
            return False  # not a message the input reader takes: it will say why
        text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
        return is_task_prompt(text)

    def client_tools(self) -> list[ToolSchema]:
        """The client's function tools, restricted by an ``allowed_tools`` tool_choice."""
        tools = [
            _tool_schema(tool)
            for tool in self.tools or ()
            if tool.get("type") != "mcp" and tool.get("type") not in HOSTED_TYPES
        ]
        allowed = _allowed_names(self.tool_choice)
        return tools if allowed is None else [tool for tool in tools if tool.name in allowed]

    def shell_tool(self) -> ShellTool | None:
        """The request's ``shell`` tool, its shape checked (None: it has none)."""
        return _shell_tool(self.tools)

    def hosted_tools(self) -> HostedTools:
        """The hosted tools the request names (``web_search``, ``code_interpreter``,
        ``shell``), their options checked."""
        return _hosted_tools(self.tools, self.include)

    def to_agent_request(self, *, with_client_tools: bool = True) -> AgentRequest:
        """Fold the instructions and input items into the system layer, history and new turn."""
        transcript = Transcript()
        if self.instructions:
            transcript.system.append(self.instructions)
        for item in self.input_items():
            transcript.add(item)
        history = transcript.messages
        user_message: str | list[dict[str, Any]] | None = None
        if history and history[-1]["role"] == "user":
            user_message = history.pop().get("content") or ""
        return AgentRequest(
            user_message=user_message,
            history=history,
            system_message="\n\n".join(transcript.system) or None,
            client_tools=self.client_tools() if with_client_tools else (),
            tool_choice=_tool_choice(self.tool_choice),
            max_tokens=self.max_output_tokens,
            temperature=self.temperature,
            reasoning_effort=self.reasoning.effort if self.reasoning else None,
            parallel_tool_calls=self.parallel_tool_calls,
            max_tool_calls=self.max_tool_calls,
            output_format=responses_output_format((self.text or {}).get("format")),
            # A background response may be followed later (GET …?stream=true): stream it.
            stream_model_replies=self.stream or self.background,
        )

    def shell(
        self, *, response_id: str, created_at: int, model: str, status: str = "in_progress"
    ) -> dict[str, Any]:
        """A Response object with no output yet: all 31 keys of Open Responses'
        ``ResponseResource``, echoing what the client asked for."""
        reasoning = self.reasoning
        shell: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "created_at": created_at,
            "completed_at": None,
            "status": status,
            "incomplete_details": None,
            "model": model,
            "previous_response_id": self.previous_response_id,
            "instructions": self.instructions,
            "output": [],
            "error": None,
            "tools": [_echo_tool(tool) for tool in self.tools or ()],
            "tool_choice": _echo_tool_choice(self.tool_choice),
            "truncation": self.truncation or "disabled",
            "parallel_tool_calls": _or(self.parallel_tool_calls, True),
            "text": {"format": {"type": "text"}, **_present(self.text or {})},
            "top_p": _or(self.top_p, 1.0),
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "temperature": _or(self.temperature, 1.0),
            "top_logprobs": 0,
            "reasoning": (
                {"effort": reasoning.effort, "summary": reasoning.summary} if reasoning else None
            ),
            "usage": None,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": self.max_tool_calls,
            "store": self.store,
            "background": self.background,
            "service_tier": self.service_tier or "default",
            "metadata": dict(self.metadata or {}),
            "safety_identifier": self.safety_identifier,
            "prompt_cache_key": self.prompt_cache_key,
        }
        if self.user is not None:
            shell["user"] = self.user
        conversation = self.conversation_id()
        if conversation is not None:
            shell["conversation"] = {"id": conversation}
        return shell


# --- tools and tool_choice ------------------------------------------------------------------------


def _tool_schema(tool: dict[str, Any]) -> ToolSchema:
    kind = tool.get("type")
    if kind in _UNSERVED_TYPES:
        raise APIError(400, _UNSERVED_TYPES[kind], param="tools")
    if kind != "function":
        raise APIError(
            400,
            f"Unsupported tool type {kind!r}: only function, mcp, shell, web_search, "
            "code_interpreter and image_generation tools are supported.",
            param="tools",
        )
    name, description = tool.get("name"), tool.get("description")
    parameters, strict = tool.get("parameters"), tool.get("strict")
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        raise APIError(
            400, f"Invalid tool name {name!r}: use 1-64 of a-z, A-Z, 0-9, _ and -.", param="tools"
        )
    if not (
        isinstance(description, str | None)
        and isinstance(parameters, dict | None)
        and isinstance(strict, bool | None)
    ):
        raise APIError(400, f"Invalid definition of tool {name!r}.", param="tools")
    return ToolSchema(
        name=name,
        description=description or "",
        parameters=parameters or {"type": "object", "properties": {}},
    )


def _echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as the Response lists it: flat, with every key present (validators insist)."""
    if tool.get("type") == "mcp":
        return echo_mcp_tool(tool)
    if tool.get("type") in HOSTED_TYPES:
        return dict(tool)  # as given: its options (a shell's skills) are the request's own
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict"),
    }


def _echo_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any]:
    """The tool_choice as the Response shows it: a web search forced by any of its names is
    ``web_search_preview``, the one name the SDKs' hosted tool_choice knows."""
    if choice is None:
        return "auto"
    if isinstance(choice, dict) and choice.get("type") in WEB_SEARCH_TYPES:
        return {"type": "web_search_preview"}
    return choice


def _tool_choice(choice: str | dict[str, Any] | None) -> ToolChoice:
    if choice is None or choice == "auto":
        return "auto"
    if choice in ("none", "required"):
        return "none" if choice == "none" else "required"
    if isinstance(choice, dict):
        kind, name, mode = choice.get("type"), choice.get("name"), choice.get("mode")
        if kind == "function" and isinstance(name, str) and name:
            return ForcedTool(name=name)
        forced = _forced_hosted(choice)
        if forced is not None:
            return ForcedTool(name=_AGENT_TOOL[forced])
        if kind == "allowed_tools" and mode in ("auto", "required"):
            _allowed_names(choice)
            return "auto" if mode == "auto" else "required"
    raise _tool_choice_error(choice)


def _allowed_names(choice: str | dict[str, Any] | None) -> frozenset[str] | None:
    """The tools an ``allowed_tools`` tool_choice permits; None for any other tool_choice."""
    if not (isinstance(choice, dict) and choice.get("type") == "allowed_tools"):
        return None
    tools = choice.get("tools")
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("name"), str)
        for t in tools
    ):
        raise _tool_choice_error(choice)
    return frozenset(tool["name"] for tool in tools)


def _check_named_functions(
    choice: str | dict[str, Any] | None, tools: list[dict[str, Any]] | None
) -> None:
    """A 400 for a tool_choice naming a function the request's function tools lack (when it
    has some), as on chat: the upstream would refuse it, which the client saw as a 502; an
    ``allowed_tools`` naming one offered the model none of them."""
    declared = {tool.get("name") for tool in tools or () if tool.get("type") == "function"}
    if not declared or not isinstance(choice, dict):
        return
    if choice.get("type") == "function":
        named = [choice.get("name")]
    elif choice.get("type") == "allowed_tools":
        named = [tool.get("name") for tool in choice.get("tools") or ()]
    else:
        return
    for name in named:
        if name not in declared:
            raise APIError(
                400,
                f"tool_choice names the function {json.dumps(name)}, which is not one of the "
                "request's tools.",
                param="tool_choice",
            )


def _forced_hosted(choice: str | dict[str, Any] | None) -> str | None:
    """The hosted tool type a ``{"type": <hosted>}`` tool_choice forces (None: none is)."""
    if not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    if kind in _UNSERVED_TYPES:
        raise APIError(400, _UNSERVED_TYPES[kind], param="tool_choice")
    return kind if isinstance(kind, str) and kind in HOSTED_TYPES else None


_AGENT_TOOL = {
    SHELL_TOOL: SHELL_TOOL,
    CODE_INTERPRETER: "code",
    IMAGE_GENERATION: IMAGE_TOOL,
    **{kind: "web_search" for kind in WEB_SEARCH_TYPES},
}
"""The agent tool a tool_choice naming a hosted type forces."""


# --- hosted tools ---------------------------------------------------------------------------------


SOURCES_INCLUDE = "web_search_call.action.sources"
"""The ``include`` value that adds a search's sources to its ``web_search_call`` item."""


@dataclass(frozen=True, slots=True)
class HostedTools:
    """The hosted tools a request names: which types, and the options the server honours."""

    types: frozenset[str] = frozenset()
    """The canonical types named: ``web_search`` (for any of its names), ``code_interpreter``,
    ``shell``."""
    allowed_domains: tuple[str, ...] | None = None
    """``web_search``'s ``filters.allowed_domains``: searches and fetches keep to these."""
    sources: bool = False
    """``include`` asked for the searches' sources."""
    container: str | None = None
    """The container id ``code_interpreter`` names (None: ``auto``): it must be one of the
    key's; the code runs in the conversation's own container in any case."""
    images: ImageOptions | None = None
    """``image_generation``'s options (None: the request has no such tool)."""

    @property
    def web_search(self) -> bool:
        return "web_search" in self.types

    @property
    def code_interpreter(self) -> bool:
        return CODE_INTERPRETER in self.types

    @property
    def image_generation(self) -> bool:
        return IMAGE_GENERATION in self.types


def _hosted_tools(tools: list[dict[str, Any]] | None, include: list[str] | None) -> HostedTools:
    types: set[str] = set()
    domains: tuple[str, ...] | None = None
    container: str | None = None
    images: ImageOptions | None = None
    for tool in tools or ():
        kind = tool.get("type")
        if kind in WEB_SEARCH_TYPES:
            if "web_search" in types:
                raise _hosted_error("At most one web_search tool per request.")
            types.add("web_search")
            domains = _allowed_domains(tool.get("filters"))
        elif kind == CODE_INTERPRETER:
            if CODE_INTERPRETER in types:
                raise _hosted_error("At most one code_interpreter tool per request.")
            types.add(CODE_INTERPRETER)
            container = _container(tool.get("container"))
        elif kind == SHELL_TOOL:
            types.add(SHELL_TOOL)
        elif kind == IMAGE_GENERATION:
            if IMAGE_GENERATION in types:
                raise _hosted_error("At most one image_generation tool per request.")
            types.add(IMAGE_GENERATION)
            images = _image_options(tool)
    sources = SOURCES_INCLUDE in (include or ())
    return HostedTools(frozenset(types), domains, sources, container, images)


_IMAGE_CHOICES = {
    "quality": ("auto", "low", "medium", "high"),
    "output_format": ("png", "jpeg", "webp"),
    "background": ("auto", "transparent", "opaque"),
}
_IMAGE_SIZE = re.compile(r"^(auto|[1-9][0-9]{1,4}x[1-9][0-9]{1,4})$")


def _image_options(tool: dict[str, Any]) -> ImageOptions:
    """``image_generation``'s settings, checked; ``model`` and the others are the profile's
    image providers' to decide, and ignored."""
    chosen: dict[str, str | None] = {}
    for name, allowed in _IMAGE_CHOICES.items():
        value = tool.get(name)
        if value is not None and value not in allowed:
            raise _hosted_error(
                f"The image_generation tool's {name} must be one of {', '.join(allowed)}."
            )
        chosen[name] = value
    size = tool.get("size")
    if size is not None and not (isinstance(size, str) and _IMAGE_SIZE.fullmatch(size)):
        raise _hosted_error(
            "The image_generation tool's size must be auto or WIDTHxHEIGHT, e.g. 1024x1024."
        )
    partial = tool.get("partial_images", 0)
    if partial is None:
        partial = 0
    if not (isinstance(partial, int) and not isinstance(partial, bool) and 0 <= partial <= 3):
        raise _hosted_error("The image_generation tool's partial_images must be 0 to 3.")
    if tool.get("action") == "edit":
        raise _hosted_error(
            "The image_generation tool's edit action is not supported: it generates new images."
        )
    return ImageOptions(
        size=None if size == "auto" else size,
        quality=None if chosen["quality"] == "auto" else chosen["quality"],
        output_format=chosen["output_format"],
        background=None if chosen["background"] == "auto" else chosen["background"],
        partial_images=partial,
    )


def _allowed_domains(filters: object) -> tuple[str, ...] | None:
    if filters is None:
        return None
    domains = filters.get("allowed_domains") if isinstance(filters, dict) else ()
    if domains is None:
        return None
    if not (
        isinstance(domains, list)
        and len(domains) <= _MAX_ALLOWED_DOMAINS
        and all(isinstance(d, str) and 0 < len(d) <= _DOMAIN_CHARS for d in domains)
    ):
        raise _hosted_error(
            f"The web_search tool's filters.allowed_domains must be a list of at most "
            f"{_MAX_ALLOWED_DOMAINS} domain names."
        )
    return tuple(domains) or None


def _container(container: object) -> str | None:
    """``"auto"``, ``{"type": "auto"}`` (None) or a container id: the code runs in the
    conversation's own container whichever it is (a response cannot borrow another's)."""
    if container == "auto":
        return None
    if isinstance(container, str) and container.startswith("cntr_"):
        return container
    if isinstance(container, dict) and container.get("type") == "auto":
        if container.get("file_ids"):
            raise _hosted_error(
                "The code_interpreter container's file_ids are not supported: attach files "
                "to a message as input_file parts; they are placed in the conversation's "
                "container."
            )
        return None
    raise _hosted_error(
        'The code_interpreter tool needs a container: "auto", {"type": "auto"} or a container id.'
    )


_MAX_ALLOWED_DOMAINS, _DOMAIN_CHARS = 100, 253


def _hosted_error(message: str) -> APIError:
    return APIError(400, message, param="tools")


def _tool_choice_error(choice: object) -> APIError:
    return APIError(400, f"Invalid tool_choice: {json.dumps(choice)}", param="tool_choice")


# --- the shell tool -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SkillReference:
    """``{"type": "skill_reference", "skill_id", "version"}``: one of the key's own skills."""

    skill_id: str
    version: str | None
    """None: the skill's default version; ``latest``: its newest."""


@dataclass(frozen=True, slots=True)
class InlineSkill:
    """``{"type": "inline", "name", "description", "source"}``: a skill sent in the request."""

    name: str
    description: str
    data: str
    """The zipped skill folder as base64, its length checked but not decoded: decoding and
    unpacking are work for a worker thread, not the event loop parsing the body."""


RequestedSkill = SkillReference | InlineSkill


@dataclass(frozen=True, slots=True)
class ShellTool:
    """A request's hosted ``shell`` tool: the agent's own shell runs the commands, with these
    skills attached to the run (``environment.skills`` of a ``container_auto``)."""

    skills: tuple[RequestedSkill, ...]


def _shell_tool(tools: list[dict[str, Any]] | None) -> ShellTool | None:
    found = [tool for tool in tools or () if tool.get("type") == SHELL_TOOL]
    if not found:
        return None
    if len(found) > 1:
        raise _shell_error("At most one shell tool per request.")
    environment = found[0].get("environment")
    if environment is None:
        return ShellTool(())
    kind = environment.get("type") if isinstance(environment, dict) else None
    if kind == "local":
        raise _shell_error(
            "The shell tool's local environment (commands run by the client) is not "
            "supported: the server runs the shell. Use a container_auto environment."
        )
    if kind == "container_reference":
        raise _shell_error(
            "The shell tool's container_reference environment is not supported: a "
            "response's shell runs in its conversation's own container (continue the "
            "conversation with previous_response_id). Use a container_auto environment."
        )
    if not isinstance(environment, dict) or kind != "container_auto":
        raise _shell_error("The shell tool's environment must be of type container_auto.")
    if environment.get("file_ids"):
        raise _shell_error(
            "The shell tool's environment.file_ids are not supported: attach files to a "
            "message as input_file parts; they are placed in the conversation's container."
        )
    if environment.get("network_policy") is not None:
        raise _shell_error(
            "The shell tool's environment.network_policy is not supported: the model's "
            "sandbox settings decide what its shell may reach."
        )
    skills = environment.get("skills") or []
    if not isinstance(skills, list):
        raise _shell_error("The shell tool's environment.skills must be a list.")
    if len(skills) > MAX_REQUEST_SKILLS:
        raise _shell_error(f"A shell tool attaches at most {MAX_REQUEST_SKILLS} skills.")
    return ShellTool(tuple(_requested_skill(skill) for skill in skills))


def _requested_skill(skill: object) -> RequestedSkill:
    kind = skill.get("type") if isinstance(skill, dict) else None
    if isinstance(skill, dict) and kind == "skill_reference":
        skill_id, version = skill.get("skill_id"), skill.get("version")
        if not isinstance(skill_id, str) or not 0 < len(skill_id) <= _SKILL_ID_CHARS:
            raise _shell_error("A skill_reference needs a skill_id.")
        if isinstance(version, int) and not isinstance(version, bool):
            version = str(version)
        if version is not None and not (
            isinstance(version, str) and 0 < len(version) <= _SKILL_VERSION_CHARS
        ):
            raise _shell_error(
                f"Invalid version of skill {skill_id!r}: give a version or 'latest'."
            )
        return SkillReference(skill_id, version)
    if isinstance(skill, dict) and kind == "inline":
        name, description, source = skill.get("name"), skill.get("description"), skill.get("source")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS:
            raise _shell_error(f"An inline skill needs a name of 1-{MAX_NAME_CHARS} characters.")
        if not isinstance(description, str):
            raise _shell_error(f"The inline skill {name!r} needs a description.")
        if not (
            isinstance(source, dict)
            and source.get("type") == "base64"
            and source.get("media_type") == "application/zip"
            and isinstance(source.get("data"), str)
        ):
            raise _shell_error(
                f"The inline skill {name!r} needs a source of type base64 with media_type "
                "application/zip and its data."
            )
        data: str = source["data"]
        # Held on the base64 text, before anything is decoded.
        if len(data) > -(-MAX_ZIP_BYTES // 3) * 4:
            raise _shell_error(
                f"The inline skill {name!r} is too large: at most {MAX_ZIP_BYTES} bytes zipped."
            )
        return InlineSkill(name, description, data)
    raise _shell_error(f"Unsupported skill type {kind!r}: use skill_reference or inline.")


def _shell_error(message: str) -> APIError:
    return APIError(400, message, param="tools")


def _present(mapping: dict[str, Any]) -> dict[str, Any]:
    """Without null values: an echoed ``"verbosity": null`` fails schema validation."""
    return {key: value for key, value in mapping.items() if value is not None}


def _or(value: _T | None, default: _T) -> _T:
    return default if value is None else value
