"""Stop signals (SIGTERM, Ctrl-C, Ctrl-Break) that act at once, whichever thread the OS hands them to.

Python runs a signal's handler on the main thread only, and only once that thread runs Python code again. The OS may
deliver a process's signal to any of its threads (macOS often does, Linux sometimes), and a main thread blocked in a
wait (a drain waits up to BRIDGE_DRAIN_S) would run the handler only when that wait ends: a second Ctrl-C would seem
ignored. So the handler itself does nothing. The C-level handler also writes the signal's number to a socket
(`signal.set_wakeup_fd`), from whichever thread took the signal, and a thread of ours reads it and acts.
"""

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import NoReturn

log = logging.getLogger(__name__)


def stop_signals() -> list[signal.Signals]:
    """The signals that ask a server to stop: Ctrl+C and SIGTERM, and Ctrl+Break where there is one (Windows)."""
    return [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGBREAK") if hasattr(signal, name)]


@contextlib.contextmanager
def on_stop_signals(drain: Callable[[str], None], now: Callable[[str], None] | None = None) -> Iterator[None]:
    """While inside: the first stop signal calls `drain(name)` (begin a graceful stop), the second `now(name)` (stop
    what runs at once, saying why); one more, or the second when there is no `now`, ends the process at once. The
    callbacks run on a thread of their own, so they must be thread-safe. The handlers in place before are restored
    on the way out. Call it from the main thread (Python sets signal handlers there only)."""
    receiver, sender = socket.socketpair()
    sender.setblocking(False)  # the C handler must never block
    previous_handlers = {sig: signal.signal(sig, _run_on_the_listener) for sig in stop_signals()}
    previous_wakeup = signal.set_wakeup_fd(sender.fileno(), warn_on_full_buffer=False)
    listener = threading.Thread(target=_listen, args=(receiver, drain, now), name="stop-signals", daemon=True)
    listener.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        sender.close()  # the listener reads end-of-file and returns
        listener.join()
        receiver.close()


def _run_on_the_listener(signum: int, frame: object) -> None:
    """The main thread's part: none (the listener acts); installed so that Python catches the signal at all."""


def _listen(receiver: socket.socket, drain: Callable[[str], None], now: Callable[[str], None] | None) -> None:
    """Count the stop signals as their numbers arrive (other handled signals write theirs too) and act on each."""
    numbers = {int(sig) for sig in stop_signals()}
    received = 0
    while True:
        try:
            data = receiver.recv(64)
        except OSError:  # Windows' socketpair is TCP: a closed end may read as a reset, not as end-of-file
            return
        if not data:
            return
        for number in data:
            if number not in numbers:
                continue
            received += 1
            name = signal.Signals(number).name
            step = drain if received == 1 else now if received == 2 else None
            if step is None:
                _exit_now(name, number)
            try:
                step(name)
            except Exception:
                log.exception("acting on %s failed; the next stop signal takes the next step", name)


def _exit_now(name: str, number: int) -> NoReturn:
    """The last resort: no drain, no cleanup. As after a kill -9, the watchdog stops the agents of a process that ends
    this way, and Bridge marks their tasks orphaned when it next looks."""
    log.warning("%s again: exiting now without waiting for anything", name)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(128 + number)
