import os
import re

import pytest

from hermes_core import ids


def test_ids_are_hex_of_the_asked_length_and_never_repeat() -> None:
    made = [ids.token_hex(12) for _ in range(3 * ids.BUFFER_BYTES // 12)]  # spans refills
    assert all(re.fullmatch(r"[0-9a-f]{24}", token) for token in made)
    assert len(set(made)) == len(made)


def test_an_id_longer_than_the_buffer_is_whole() -> None:
    assert len(ids.token_hex(ids.BUFFER_BYTES + 5)) == 2 * (ids.BUFFER_BYTES + 5)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_hand_out_its_parents_next_bytes() -> None:
    ids.token_hex(1)  # the parent has a buffer with bytes left
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, ids.token_hex(12).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child != ids.token_hex(12)
