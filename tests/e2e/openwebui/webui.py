"""A page object for Open WebUI 0.12.4: what a user does in a chat, and what the page and Open
WebUI's own store then show.

Every wait polls observable state with a generous deadline and fails at once, with the log's
tail, if hermes-server or Open WebUI died meanwhile. Selectors are Open WebUI's (see
/work/shared/reference/open-webui.md and docs/openwebui.md); they live here only, so a new Open
WebUI release is fixed in one place.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tests.e2e.openwebui.servers import MODEL, Process

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

T = TypeVar("T")

TURN_SECONDS = 120
"""The longest a turn may take (a busy two-core machine runs a shell command in it)."""
STEP_SECONDS = 60
"""The longest one visible step (a card appearing, a button becoming enabled) may take."""
POLL_MS = 200

STOP = 'button[aria-label="Stop"]'
ASSISTANT = ".chat-assistant"
ANSWER = "#response-content-container"
TOOL_CARD = '[id$="-tool-call"]'


def _grown(now: str, before: str) -> str | None:
    return now if len(now) > len(before) else None


class WebUI:
    """One browser page on Open WebUI, at one chat at a time."""

    def __init__(
        self, page: Page, base_url: str, *, watched: Sequence[Process], artifacts: Path
    ) -> None:
        self.page = page
        self.base_url = base_url
        self.watched = tuple(watched)
        self.artifacts = artifacts
        page.set_default_timeout(STEP_SECONDS * 1000)

    # --- waiting ------------------------------------------------------------------------------

    def until(self, what: str, check: Callable[[], T | None], seconds: float = STEP_SECONDS) -> T:
        """Poll ``check`` until it returns something truthy, and return that; fail with
        ``what`` when time runs out, or at once if a process under test died."""
        deadline = time.monotonic() + seconds
        while True:
            value = check()
            if value:
                return value
            for process in self.watched:
                died = process.died()
                if died is not None:
                    raise AssertionError(f"while waiting for {what}: {died}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {seconds:.0f} s")
            self.page.wait_for_timeout(POLL_MS)

    # --- a chat -------------------------------------------------------------------------------

    def open(self, model: str = MODEL) -> None:
        """A new chat with ``model`` (an id as Open WebUI lists it)."""
        self.page.goto(f"{self.base_url}/?models={model}", wait_until="load")
        editor = self.page.locator("#chat-input")
        editor.wait_for(state="visible")
        self._dismiss_modals()
        self.until(f"model {model} selected", lambda: model in self.selected_models())

    def selected_models(self) -> list[str]:
        """The model ids the chat will use, as the page's model picker holds them."""
        found: list[str] = self.page.evaluate(
            "() => Array.from(document.querySelectorAll('#model-selector-0-button, "
            "[id^=model-selector-]')).map(e => e.textContent.trim())"
        )
        return found

    def _dismiss_modals(self) -> None:
        # A fresh browser profile gets the "What's New" dialog, which takes the pointer.
        def gone() -> bool:
            if self.page.locator("div.modal, [role=dialog]").count() == 0:
                return True
            self.page.keyboard.press("Escape")
            return False

        self.until("the What's New dialog closed", gone)

    def send(self, prompt: str) -> None:
        """Type ``prompt`` into the message box and send it (the turn goes on; see
        :meth:`wait_turn_end`)."""
        self._answers_before = self.page.locator(ASSISTANT).count()
        editor = self.page.locator("#chat-input")
        editor.click()
        self.page.keyboard.insert_text(prompt)
        self.page.keyboard.press("Enter")
        self.until(
            "the question sent", lambda: self.page.locator(ASSISTANT).count() > self._answers_before
        )

    def generating(self) -> bool:
        """Whether an answer is being generated (the Stop button is there)."""
        buttons: int = self.page.locator(STOP).count()
        return buttons > 0

    def wait_turn_end(self, seconds: float = TURN_SECONDS) -> None:
        """Wait until the answer being generated is finished (its Stop button gone and Open
        WebUI's store says it is done)."""
        self.until(
            "the end of the turn", lambda: not self.generating() and self._last_done(), seconds
        )

    def ask(self, prompt: str, seconds: float = TURN_SECONDS) -> str:
        """Send ``prompt``, wait for the whole answer, and return its text as shown."""
        self.send(prompt)
        self.wait_turn_end(seconds)
        return self.answer_text()

    def stop(self) -> None:
        """Click Stop (the turn must be generating)."""
        self.page.locator(STOP).first.click()
        self.until("the Stop button gone", lambda: not self.generating())

    # --- what the page shows ------------------------------------------------------------------

    def last_answer(self) -> Locator:
        return self.page.locator(ASSISTANT).last

    def answer_text(self) -> str:
        """The last answer as shown: its reasoning and tool rows, text, and sources."""
        text: str = self.last_answer().locator(ANSWER).inner_text()
        return text

    def answer_prose(self) -> str:
        """The last answer's own text only (its Markdown), without reasoning, cards or
        status."""
        parts: list[str] = self.last_answer().locator(f"{ANSWER} .markdown-prose").all_inner_texts()
        return "\n".join(parts)

    def tool_cards(self, tool: str | None = None) -> Locator:
        """The last answer's tool cards (``tool``'s only, when given): rows reading
        "Executing shell..." while the tool runs, "View Result from shell" once it is done."""
        cards = self.last_answer().locator(TOOL_CARD)
        return cards if tool is None else cards.filter(has_text=tool)

    def open_card(self, card: Locator) -> str:
        """Expand a tool card and return what it then shows (its input and output)."""
        before: str = card.inner_text()
        card.get_by_role("button").first.click()
        expanded: str = self.until("the card expanded", lambda: _grown(card.inner_text(), before))
        return expanded

    def status_text(self) -> str:
        """The last answer's status line ('' when it has none)."""
        status = self.last_answer().locator(".status-description")
        if status.count() == 0:
            return ""
        text: str = status.first.inner_text()
        return text

    def usage_text(self) -> str:
        """The token usage Open WebUI shows for the last answer: the tooltip of its (i)
        button, which exists only while the pointer is over the button."""
        self.page.locator('button[id^="info-"]').last.hover()  # below .chat-assistant
        tooltip = self.page.locator("[data-tippy-root]").filter(has_text="tokens")

        def shown() -> str | None:
            if tooltip.count() == 0:
                return None
            text: str = tooltip.first.inner_text()
            return text

        return self.until("the usage tooltip", shown)

    def images(self) -> Locator:
        """The images inside the last answer's text."""
        return self.last_answer().locator(f"{ANSWER} img")

    # --- Open WebUI's store -------------------------------------------------------------------

    def chat_id(self) -> str:
        """The id of the chat on the page (Open WebUI names it in the URL once it is saved)."""
        return self.until("a saved chat (/c/<id>)", self._url_chat_id)

    def _url_chat_id(self) -> str | None:
        path = self.page.url.split("?", 1)[0].rstrip("/")
        parts = path.split("/")
        return parts[-1] if len(parts) >= 2 and parts[-2] == "c" else None

    def api(self, path: str) -> Any:
        """GET an Open WebUI API path as the logged-in user (its token from local storage)."""
        token = self.page.evaluate("() => localStorage.token")
        response = self.page.request.get(
            f"{self.base_url}{path}", headers={"authorization": f"Bearer {token}"}
        )
        assert response.ok, f"GET {path}: {response.status} {response.text()[:500]}"
        return response.json()

    def stored_chat(self) -> dict[str, Any]:
        """The chat as Open WebUI stored it (``GET /api/v1/chats/{id}``)."""
        chat: dict[str, Any] = self.api(f"/api/v1/chats/{self.chat_id()}")
        return chat

    def stored_messages(self) -> list[dict[str, Any]]:
        """The stored chat's messages of the current branch, oldest first."""
        history = self.stored_chat()["chat"]["history"]
        messages: dict[str, dict[str, Any]] = history["messages"]
        branch = []
        current = history.get("currentId")
        while current:
            message = messages[current]
            branch.append(message)
            current = message.get("parentId")
        return branch[::-1]

    def stored_answer(self) -> dict[str, Any]:
        """The last stored assistant message."""
        answers = [m for m in self.stored_messages() if m.get("role") == "assistant"]
        assert answers, "the stored chat has no answer"
        return answers[-1]

    def _last_done(self) -> bool:
        """Whether the store holds every answer the page shows, the last one done."""
        if self._url_chat_id() is None:
            return False
        answers = [m for m in self.stored_messages() if m.get("role") == "assistant"]
        shown: int = self.page.locator(ASSISTANT).count()
        return len(answers) == shown and bool(answers[-1].get("done"))

    # --- attachments --------------------------------------------------------------------------

    def attach(self, path: Path) -> None:
        """Attach a file to the next message through the page's file input, and wait until
        Open WebUI has taken it."""
        self.page.locator('input[type="file"]').first.set_input_files(str(path))
        self.until(
            f"{path.name} attached",
            lambda: self.page.get_by_text(path.name).count() > 0,
        )

    # --- failures -----------------------------------------------------------------------------

    def save_artifacts(self) -> list[str]:
        """A screenshot and the HTML of the page, for a failed test; the lines saying where."""
        self.artifacts.mkdir(parents=True, exist_ok=True)
        lines = []
        screenshot, html = self.artifacts / "page.png", self.artifacts / "page.html"
        try:
            self.page.screenshot(path=str(screenshot), full_page=True, timeout=15_000)
            lines.append(f"screenshot: {screenshot}")
        except Exception as error:  # the page may be what broke
            lines.append(f"no screenshot: {error}")
        try:
            html.write_text(self.page.content())
            lines.append(f"page HTML: {html}")
        except Exception as error:
            lines.append(f"no page HTML: {error}")
        try:
            chat = self.stored_chat() if self._url_chat_id() else None
            if chat is not None:
                stored = self.artifacts / "chat.json"
                stored.write_text(json.dumps(chat, indent=2))
                lines.append(f"stored chat: {stored}")
        except Exception as error:
            lines.append(f"no stored chat: {error}")
        return lines
