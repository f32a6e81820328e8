"""The stdout reader hands on exactly the lines the agent wrote, however the pipe cuts them into reads.

Streams are generated (lines of any length around the cap, with and without a last newline) and read in chunks of
generated sizes; what the run receives is compared with the lines themselves.
"""

import queue

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.supervision.recording import (
    LINE_HEAD_BYTES,
    OUTPUT_ENDED,
    QUIET_READ_BYTES,
    READ_CHUNK_BYTES,
    LineReader,
    Output,
    Oversized,
)


class Pipe:
    """A stream whose read1 returns the data in the given chunk sizes (then what is left, then b"")."""

    def __init__(self, data: bytes, cuts: list[int]) -> None:
        self.data, self.cuts = data, list(cuts)
        self.asked: list[int] = []

    def read1(self, size: int) -> bytes:
        self.asked.append(size)
        take = min(size, self.cuts.pop(0) if self.cuts else size)
        chunk, self.data = self.data[:take], self.data[take:]
        return chunk


def expected(data: bytes, max_bytes: int) -> list[bytes | Oversized]:
    """Each line as the run must see it: whole with its newline, or (its text over the cap) the first
    LINE_HEAD_BYTES of its text and its size."""
    lines = data.split(b"\n")
    whole = [(text, text + b"\n") for text in lines[:-1]] + ([(lines[-1], lines[-1])] if lines[-1] else [])
    return [Oversized(text[:LINE_HEAD_BYTES], len(line)) if len(text) > max_bytes else line for text, line in whole]


def read_all(data: bytes, cuts: list[int], max_bytes: int) -> list[bytes | Oversized]:
    inbox: queue.Queue = queue.Queue()
    LineReader(Pipe(data, cuts), inbox, max_bytes).run()
    items = [inbox.get_nowait() for _ in range(inbox.qsize())]
    assert items[-1] is OUTPUT_ENDED and all(isinstance(item, Output) and item.lines for item in items[:-1])
    return [line for item in items[:-1] for line in item.lines]


LINES = st.lists(st.integers(0, 3000).map(lambda n: bytes((97 + i % 26) for i in range(n))), max_size=8).map(b"\n".join)


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    data=LINES | LINES.map(lambda d: d + b"\n"),
    cuts=st.lists(st.integers(1, 4000), max_size=40),
    max_bytes=st.sampled_from([1, 5, 100, 1024, 1999, 2000, 2500]),
)
def test_lines_arrive_whole_or_cut_to_their_head_however_the_reads_fall(data, cuts, max_bytes):
    assert read_all(data, cuts, max_bytes) == expected(data, max_bytes)


def test_a_flood_of_small_lines_is_one_hand_off_per_read():
    data = b"".join(b'{"type": "text", "n": %d}\n' % n for n in range(3000))
    inbox: queue.Queue = queue.Queue()
    pipe = Pipe(data, [QUIET_READ_BYTES] + [len(data) // 3] * 3)
    LineReader(pipe, inbox, 1024).run()
    assert pipe.asked[:3] == [QUIET_READ_BYTES, READ_CHUNK_BYTES, READ_CHUNK_BYTES]
    assert inbox.qsize() == len(pipe.asked)  # a hand-off per read that found lines, then the end
    assert sum(len(inbox.get_nowait().lines) for _ in range(len(pipe.asked) - 1)) == 3000


@hypothesis_settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(1, 3 * QUIET_READ_BYTES), min_size=1, max_size=30))
def test_reads_are_large_only_while_the_agent_writes_faster_than_they_read(cuts):
    """A read that waits holds its buffer, so a quiet agent's reads ask for QUIET_READ_BYTES; a read that found at
    least that much (the agent is ahead) is followed by a full-size one."""
    pipe = Pipe(b"x\n" * (sum(cuts) // 2 + 1), cuts)
    LineReader(pipe, queue.Queue(), 1024).run()
    found = [min(size, cut) for size, cut in zip(pipe.asked, cuts, strict=False)]
    assert pipe.asked[0] == QUIET_READ_BYTES
    for got, next_ask in zip(found, pipe.asked[1:], strict=False):
        assert next_ask == (READ_CHUNK_BYTES if got >= QUIET_READ_BYTES else QUIET_READ_BYTES), (found, pipe.asked)
