"""Being told when a child exits, without polling and without a blocked thread per child where the OS allows.

On Linux one thread waits on a pidfd per child (epoll) and calls each child's callback once it has exited; the child
is left for its owner to reap (`Popen.poll()`), so nothing else ever waits on it. Elsewhere, or where a pidfd cannot
be had, a small thread per child waits on it instead (`Popen.wait()`), which is what every OS offers.
"""

import logging
import os
import selectors
import subprocess
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class ExitWatcher:
    """Calls `callback()` from its own thread once the watched child has exited (at once if it already has)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._selector: selectors.BaseSelector | None = None

    def watch(self, proc: subprocess.Popen, callback: Callable[[], None]) -> None:
        fd = self._pidfd(proc)
        if fd is None:
            threading.Thread(target=_wait_then, args=(proc, callback), daemon=True, name=f"exit-{proc.pid}").start()
            return
        with self._lock:
            if self._selector is None:
                self._selector = selectors.DefaultSelector()
                threading.Thread(target=self._serve, args=(self._selector,), daemon=True, name="exit-watcher").start()
            self._selector.register(fd, selectors.EVENT_READ, callback)

    @staticmethod
    def _pidfd(proc: subprocess.Popen) -> int | None:
        if not hasattr(os, "pidfd_open"):
            return None
        try:
            return os.pidfd_open(proc.pid)
        except OSError as exc:  # an old kernel, or a sandbox that refuses it: a thread per child will do
            log.debug("no pidfd for pid %s (%s); waiting on it in a thread", proc.pid, exc)
            return None

    def _serve(self, selector: selectors.BaseSelector) -> None:
        while True:
            for key, _ in selector.select():  # epoll also reports fds registered while it waits
                with self._lock:
                    selector.unregister(key.fd)
                os.close(key.fd)
                try:
                    key.data()
                except Exception:  # one owner's failure must not stop the others' exits being seen
                    log.exception("exit watcher: a callback failed")


def _wait_then(proc: subprocess.Popen, callback: Callable[[], None]) -> None:
    proc.wait()
    callback()
