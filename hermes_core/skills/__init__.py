"""Skills (the Agent Skills format): folders with a ``SKILL.md`` that teach the agent a
procedure, offered to a run by name and description and read on demand.

- :mod:`~hermes_core.skills.library` — what a skill is to the rest of the code (an entry in a
  listing, a bundle of files) and the store of a key's own skills, as a protocol;
- :mod:`~hermes_core.skills.format` — reading and checking a ``SKILL.md`` and a skill's files.
"""
