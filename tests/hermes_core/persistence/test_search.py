"""``session_search`` over SQL: the same sessions match, in the same order and with the same
snippets, as with the in-memory index."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from hermes_core.memory_stores import InMemorySessionIndex
from hermes_core.messages import Message
from hermes_core.persistence import Store
from hermes_core.stores import SessionHit
from tests.hermes_core.persistence.helpers import (
    assistant,
    new_session,
    stored,
    tool_call,
    tool_result,
    user,
)

RELEASE: list[Message] = [
    user("Why does the release fail?"),
    tool_call("call_1", "terminal", '{"command": "make release"}'),
    tool_result("call_1", "ERROR: quokka-cache is stale"),
    assistant("The cache is stale; clearing it fixes the release."),
    user("Thanks."),
    assistant("You're welcome."),
    user("One more thing."),
]
GARDEN: list[Message] = [
    user("Which plants like shade?"),
    assistant("Ferns and hostas like shade; the Release of pollen is in spring."),
]
TRACEBACK: list[Message] = [
    user("The build broke"),
    tool_result(
        "call_9",
        "File src/hermes/main.py, line 3: see https://docs.example.org/guide, "
        "mail ops@example.com, needs v2.0.1 of foo.bar_baz",
    ),
]


async def _add(store: Store, session_id: str, messages: list[Message], **options: str) -> None:
    await new_session(store, *messages, session_id=session_id, **options)
    await asyncio.sleep(0.002)  # the next session is strictly newer


async def _ids(store: Store, query: str, *, owner: str = "alice", limit: int = 10) -> list[str]:
    return [hit.session_id for hit in await store.search.search(owner, query, limit=limit)]


async def test_finds_a_session_by_a_word_only_in_a_tool_result(store: Store) -> None:
    await _add(store, "release", RELEASE)
    await _add(store, "garden", GARDEN)
    assert await _ids(store, "quokka") == ["release"]


async def test_a_hit_carries_the_title_a_snippet_and_the_messages_around_it(store: Store) -> None:
    await _add(store, "release", RELEASE, title="Release trouble")
    [hit] = await store.search.search("alice", "quokka", limit=5)
    assert hit == SessionHit(
        session_id="release",
        title="Release trouble",
        snippet="ERROR: quokka-cache is stale",
        messages=RELEASE[0:5],
    )


async def test_a_session_matches_only_when_it_holds_every_word(store: Store) -> None:
    await _add(store, "release", RELEASE)
    await _add(store, "garden", GARDEN)
    # "quokka" and "welcome" are in different messages of the same session.
    assert await _ids(store, "quokka welcome") == ["release"]
    assert await _ids(store, "quokka shade") == []
    assert await _ids(store, "release") == ["garden", "release"]


async def test_words_match_whole_and_regardless_of_case(store: Store) -> None:
    await _add(store, "release", RELEASE)
    assert await _ids(store, "QUOKKA Stale") == ["release"]
    assert await _ids(store, "quok") == []
    assert await _ids(store, "stal") == []


async def test_search_sees_only_the_owners_sessions(store: Store) -> None:
    await _add(store, "release", RELEASE, owner="alice")
    assert await _ids(store, "quokka", owner="bob") == []


async def test_compacted_messages_are_not_searched(store: Store) -> None:
    session_id = store.sessions.create(owner="alice", profile="p", system_prompt="s")
    store.sessions.add_messages(session_id, 0, stored(user("about the quokka"), compacted=True))
    store.sessions.add_messages(session_id, 1, stored(user("and the wombat")))
    assert await _ids(store, "quokka") == []
    [hit] = await store.search.search("alice", "wombat", limit=5)
    assert hit.messages == [user("and the wombat")]


async def test_newest_sessions_come_first_up_to_the_limit(store: Store) -> None:
    for index in range(4):
        await _add(store, f"s{index}", [user(f"note {index} on quokkas")])
    assert await _ids(store, "quokkas") == ["s3", "s2", "s1", "s0"]
    assert await _ids(store, "quokkas", limit=2) == ["s3", "s2"]
    assert await _ids(store, "quokkas", limit=0) == []


async def test_words_inside_paths_addresses_and_numbers_are_found(store: Store) -> None:
    await _add(store, "traceback", TRACEBACK)
    for word in ("hermes", "main", "docs", "guide", "ops", "v2", "1", "bar_baz"):
        assert await _ids(store, word) == ["traceback"], word


async def test_accented_words_and_unicode_punctuation_are_handled(store: Store) -> None:
    await _add(store, "unicode", [user("L'ÉCOLE ferme — voilà l’essentiel")])
    for word in ("école", "ferme", "voilà", "essentiel"):
        assert await _ids(store, word) == ["unicode"], word


QUERIES = [
    "quokka",
    "release",
    "Release CACHE",
    "stale release thanks",
    "you're",
    "terminal make",
    "call_1",
    "shade spring",
    "main py",
    "foo",
    "nothing here",
    "",
    "?!",
]


async def test_results_agree_with_the_in_memory_index(store: Store) -> None:
    index = InMemorySessionIndex()
    for session_id, messages in (("release", RELEASE), ("garden", GARDEN), ("tb", TRACEBACK)):
        await _add(store, session_id, messages, title=session_id.title())
        index.add_session("alice", session_id, session_id.title(), messages)

    for query in QUERIES:
        expected = await index.search("alice", query, limit=10)
        assert await store.search.search("alice", query, limit=10) == expected, query


async def _indexed(store: Store, word: str) -> int:
    """Messages the full-text index itself (not its content table) finds ``word`` in."""
    match = text("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH :word")
    async with store.db.engine.connect() as conn:
        found: int = (await conn.execute(match, {"word": word})).scalar_one()
        return found


async def test_sqlite_indexes_in_batches_yet_a_search_finds_everything_written(
    store: Store,
) -> None:
    if not store.db.search_index.batched:
        return  # PostgreSQL maintains its own index
    await _add(store, "release", RELEASE)  # the first append indexes with its commit
    await store.db.writer.flush()
    await _add(store, "garden", GARDEN)  # within the interval: left for later
    await store.db.writer.flush()
    assert (await _indexed(store, "quokka"), await _indexed(store, "hostas")) == (1, 0)
    assert await _ids(store, "hostas") == ["garden"]  # the search caught the index up
    assert await _indexed(store, "hostas") == 1


async def test_a_recall_by_topic_words_ranks_sessions_by_words_held_like_the_index(
    store: Store,
) -> None:
    await _add(store, "release", RELEASE)
    await _add(store, "garden", GARDEN)
    await _add(store, "traceback", TRACEBACK)
    query = "Why does the release of the build fail again?"
    index = InMemorySessionIndex()
    for session_id, messages in (
        ("release", RELEASE),
        ("garden", GARDEN),
        ("traceback", TRACEBACK),
    ):
        index.add_session("alice", session_id, session_id, messages)

    hits = await store.search.search("alice", query, limit=3, every_word=False)
    in_memory = await index.search("alice", query, limit=3, every_word=False)

    # release holds "release" and "fail"; then the newest of those holding one word.
    assert [hit.session_id for hit in hits] == ["release", "traceback", "garden"]
    assert [hit.session_id for hit in in_memory] == [hit.session_id for hit in hits]
