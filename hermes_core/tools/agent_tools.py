"""The agent-level tools: ``todo``, ``memory`` and ``session_search``.

Each lives in its own module (:mod:`~hermes_core.tools.todo`, :mod:`~hermes_core.tools.memory`,
:mod:`~hermes_core.tools.session_search`); this one gathers their factories for the agent.
Each factory closes over a store from :mod:`hermes_core.stores` and the identity it acts for
(a session, an owner), so the model can never name another session or owner in its arguments.
Bad arguments come back as an ``Error: …`` string instead of an exception: the model reads
it as the tool result and can correct its next call.
"""

from hermes_core.tools.memory import memory_snapshot, memory_tool
from hermes_core.tools.session_search import session_search_tool
from hermes_core.tools.todo import todo_tool

__all__ = [
    "AGENT_LEVEL_TOOLS",
    "ALWAYS_ON_TOOLS",
    "HOUSEKEEPING_TOOLS",
    "SKILL_TOOLS",
    "memory_snapshot",
    "memory_tool",
    "session_search_tool",
    "todo_tool",
]

SKILL_TOOLS = ("skills_list", "skill_view", "skill_manage")
"""The ``skills`` toolset's tools (``tools/skills.py``): agent-level, on unless a profile's
``skills.enabled`` is false."""
AGENT_LEVEL_TOOLS = frozenset(
    {"todo", "memory", "session_search", "delegate_task", "clarify", *SKILL_TOOLS}
)
"""Names the loop reserves for its own tools; a client tool may not take them."""
HOUSEKEEPING_TOOLS = frozenset({"todo", "memory"})
"""Tools whose calls are bookkeeping: text the model wrote beside them may be its answer."""
ALWAYS_ON_TOOLS = ("todo", "memory", "session_search", "delegate_task")
"""The agent-level tools every profile has (``clarify`` needs a callback to answer it)."""
