"""What a shutdown's join costs past the deadline: the threads of abandoned bodies are passed over on
their flag alone (never joined, never asked whether they are alive), and every other thread is
joined and, if it outlives the join, returned as a straggler."""

from __future__ import annotations

import threading
import time

from run_supervisor.actors._threads import ThreadBook


class _Token:
    def __init__(self, abandoned: bool) -> None:
        self.abandoned = abandoned


class _CountingThread(threading.Thread):
    """A thread that counts how often it is asked whether it is alive."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__(target=release.wait, args=(30,), daemon=True)
        self.asked = 0

    def is_alive(self) -> bool:
        self.asked += 1
        return super().is_alive()


def test_joining_passes_over_abandoned_bodies_without_asking_whether_their_threads_are_alive() -> None:
    book = ThreadBook()
    release = threading.Event()
    abandoned = [_CountingThread(release) for _ in range(50)]
    given_up = _CountingThread(release)  # given up on by name (an overrun hook's thread)
    ended = threading.Thread(target=lambda: None)
    for thread in (*abandoned, given_up, ended):
        thread.start()
    ended.join(10)
    try:
        for thread in abandoned:
            book.add(thread, token=_Token(abandoned=True))
        book.add(given_up)
        book.abandoned.add(given_up)
        book.add(ended, token=_Token(abandoned=False))
        assert book.join(time.monotonic() + 10) == []
        assert [t.asked for t in (*abandoned, given_up)] == [0] * 51
        assert all(t.is_alive() for t in abandoned)  # left running, as an abandoned body is
    finally:
        release.set()
        for thread in (*abandoned, given_up):
            thread.join(10)


def test_joining_returns_the_threads_that_outlived_it_and_none_that_ended() -> None:
    book = ThreadBook()
    release = threading.Event()
    straggler = threading.Thread(target=release.wait, args=(30,), daemon=True)
    quick = threading.Thread(target=lambda: None)
    straggler.start()
    quick.start()
    quick.join(10)
    try:
        book.add(straggler, token=_Token(abandoned=False))
        book.add(quick)
        assert book.join(time.monotonic()) == [straggler]  # a deadline already past: no wait
    finally:
        release.set()
        straggler.join(10)
