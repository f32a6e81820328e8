"""`manage.py runbridge`: Bridge's web side and its supervisor, started together — the embedded default.

With one web process (one core, Windows, an IPv6 address) this process serves and supervises. With more, it binds the
port, runs the supervisor and starts that many web processes sharing the socket, so no stream or request waits behind
the supervisor's recording (docs/architecture.md, "Process model"). It prints a one-time login link for the browser,
so a newcomer needs no password to get in.
"""

from __future__ import annotations

import argparse
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

from daphne.endpoints import build_endpoint_description_strings
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections

from jobs import actions, processes
from jobs.agents import executors
from jobs.core.hints import manage_command
from jobs.core.terminal import printable
from jobs.integrations import tool_configs
from jobs.management.startup import check_agents, check_database
from jobs.models import PermissionRequest
from jobs.supervision.supervisor import Supervisor
from jobs.web.auth import login_link_path, login_user

log = logging.getLogger("jobs")

# A web process has this long to start serving; runbridge looks this often for one that has exited by itself, and
# starts one again at most WEB_RESTART_S after the last start in its place (one that cannot start is not a busy loop).
WEB_START_S = 60
WEB_CHECK_S = 1.0
WEB_RESTART_S = 5.0


def check_port_free(host: str, port: int) -> None:
    """Fail before anything starts (the supervisor included) when the address is taken, saying what to do."""
    if port != 0:
        bind(host, port).close()


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, or a CommandError saying what to do when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family, backlog=settings.BRIDGE_LISTEN_BACKLOG)
    except OSError as exc:
        raise CommandError(port_taken(host, port, exc.strerror or str(exc))) from None


def shared_endpoint(listener: socket.socket) -> str:
    """The Twisted endpoint that adopts the IPv4 socket `listener` in the web processes that inherit it (Daphne's `fd`
    endpoint parser takes no other address family)."""
    return f"fd:fileno={listener.fileno()}"


def port_taken(host: str, port: int, reason: str) -> str:
    return (
        f"cannot listen on {printable(host)}:{port}: {printable(reason)}. Is Bridge (or another server) already "
        "running there? "
        f"Stop it, or use another port: `make run PORT={port + 1}` "
        f"(or {manage_command('runbridge', '--port', str(port + 1))})"
    )


class Command(BaseCommand):
    help = "Serve Bridge on 127.0.0.1 and run its tasks. SIGTERM, Ctrl-C or Ctrl-Break: drain while serving, then exit."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8800, help="port (default 8800; 0 picks a free one)")
        parser.add_argument("--no-supervisor", action="store_true", help="serve only; run tasks elsewhere")
        parser.add_argument("--inherited-endpoint", help=argparse.SUPPRESS)  # a web process: serve the parent's socket

    def handle(self, *args, host, port, no_supervisor, inherited_endpoint, **options):
        if inherited_endpoint:
            return self._serve_inherited(inherited_endpoint)
        self.url = ""
        self.web_processes: list[subprocess.Popen] = []
        self.web_started: list[float] = []  # when each of them started (time.monotonic)
        sharing = settings.BRIDGE_WEB_PROCESSES > 1 and processes.can_share_listening_socket() and ":" not in host
        listener = bind(host, port) if sharing else None
        if listener is None:
            check_port_free(host, port)
        check_database()
        check_agents()
        self.login_path = self._login_link()
        connections.close_all()  # this thread only waits from here on: give its connection (a pool slot) back
        supervisor, thread = (None, None) if no_supervisor else self._start_supervisor()
        try:
            if listener is None:
                self._serve_here(host, port, supervisor, thread)
            else:
                self._mind_web_processes(listener, supervisor, thread)
        finally:
            if thread is not None and thread.is_alive():  # serving ended by itself (it could not listen, or failed)
                supervisor.request_stop()
                thread.join()

    def _start_supervisor(self) -> tuple[Supervisor, threading.Thread]:
        self.stderr.write(printable("\n".join(executors.startup_lines(executors.executor_report())), multiline=True))
        self._take_over()
        supervisor = Supervisor(started_by=actions.STARTED_BY_RUNBRIDGE)
        thread = threading.Thread(target=supervisor.run, name="supervisor", daemon=True)
        thread.start()
        if not supervisor.ready.wait(timeout=60):
            raise CommandError("the supervisor did not start within 60 s (is the database reachable?)")
        if supervisor.startup_error:
            raise CommandError(f"{printable(supervisor.startup_error)}. Did you run {manage_command('migrate')}?")
        return supervisor, thread

    def _take_over(self) -> None:
        """One data dir, one supervisor for its tasks: one that an MCP server started (in its client's environment,
        which may lack the agents' logins) hands over to this one; any other live one is named, since both claim."""
        for worker in actions.ask_to_hand_over():
            self.stderr.write(
                f"Taking over from the supervisor an MCP server started (pid {worker.pid}): it starts no new task, "
                "lets its running ones end, and exits; new tasks run here."
            )
        for worker in actions.live_supervisors():
            if worker.machine == settings.BRIDGE_MACHINE_ID and worker.handover_requested_at is None:
                self.stderr.write(
                    f"Note: another supervisor runs this data dir's tasks too: {printable(worker.name)} (pid "
                    f"{worker.pid}, started by {worker.started_by or 'an older Bridge'}); both claim queued tasks."
                )

    # --- one process: it serves, and supervises on a thread ---------------------------------------------------------

    def _serve_here(self, host: str, port: int, supervisor: Supervisor | None, thread: threading.Thread | None) -> None:
        from bridge.asgi import application  # here, not above: see _serve_inherited
        from jobs.web import webserver

        stopping = Stopping(self, supervisor, thread, stop_serving=webserver.stop_serving)
        endpoints = build_endpoint_description_strings(host=host, port=port)
        endpoints = [f"{endpoint}:backlog={settings.BRIDGE_LISTEN_BACKLOG}" for endpoint in endpoints]
        failure = webserver.serve(
            application, endpoints, on_listening=self._announce, drain=stopping.drain, now=stopping.now
        )
        if failure:
            raise CommandError(port_taken(host, port, failure))

    def _serve_inherited(self, endpoint: str) -> None:
        """A web process started by runbridge: its socket, no supervisor, no messages. It says "serving" on stdout once
        it listens, and stops when its stdin closes (runbridge closed it, or died)."""
        # Imported here: a runbridge that only supervises never serves, and Twisted, Daphne and the app cost it 27 MB.
        from bridge.asgi import application
        from jobs.web import webserver

        def stop_when_the_parent_does() -> None:
            sys.stdin.buffer.read()  # returns at EOF
            webserver.stop_serving()

        def ready(address: tuple[str, int]) -> None:
            sys.stdout.write("serving\n")
            sys.stdout.flush()

        threading.Thread(target=stop_when_the_parent_does, name="parent-watch", daemon=True).start()
        webserver.serve(application, [endpoint], shares_socket=True, on_listening=ready)

    # --- more processes: this one supervises, the web processes serve its socket ------------------------------------

    def _mind_web_processes(
        self, listener: socket.socket, supervisor: Supervisor | None, thread: threading.Thread | None
    ) -> None:
        """Start the web processes, announce once they serve, start one again if it exits by itself, and stop them
        once the drain is over (or at once without a supervisor)."""
        stopped = threading.Event()
        stopping = Stopping(self, supervisor, thread, stop_serving=stopped.set)
        try:
            for _ in range(settings.BRIDGE_WEB_PROCESSES):
                self.web_processes.append(self._start_web_process(listener))
                self.web_started.append(time.monotonic())
            for web in self.web_processes:
                self._wait_until_serving(web)
            with processes.on_stop_signals(stopping.drain, stopping.now):
                self._announce(listener.getsockname()[:2])
                while not stopped.wait(WEB_CHECK_S):
                    self._restart_exited(listener)
        finally:
            self._stop_web_processes()
            listener.close()

    def _start_web_process(self, listener: socket.socket) -> subprocess.Popen:
        argv = [sys.executable, str(settings.BASE_DIR / "manage.py"), "runbridge", "--no-supervisor"]
        argv += ["--inherited-endpoint", shared_endpoint(listener)]
        env, cwd = executors.started_environ(), str(settings.BASE_DIR)
        return processes.spawn_sharing(argv, listener.fileno(), env=env, cwd=cwd)

    def _wait_until_serving(self, web: subprocess.Popen) -> None:
        """Wait for its "serving" line; one that has not said it within WEB_START_S is killed."""
        deadline = threading.Timer(WEB_START_S, web.kill)
        deadline.start()
        said = pipe(web.stdout).readline()
        deadline.cancel()
        if not said:
            raise CommandError(
                f"a web process did not start serving (exit code {web.wait()}): its error is above, if it printed one"
            )

    def _restart_exited(self, listener: socket.socket) -> None:
        now = time.monotonic()
        for index, web in enumerate(self.web_processes):
            if web.poll() is not None and now - self.web_started[index] >= WEB_RESTART_S:
                log.warning("web process %d exited by itself (exit code %s); starting another", web.pid, web.returncode)
                pipe(web.stdin).close()
                pipe(web.stdout).close()
                self.web_processes[index], self.web_started[index] = self._start_web_process(listener), now

    def _stop_web_processes(self) -> None:
        for web in self.web_processes:
            pipe(web.stdin).close()
        for web in self.web_processes:
            try:
                web.wait(timeout=15)
            except subprocess.TimeoutExpired:
                log.warning("web process %d did not stop within 15 s; killing it", web.pid)
                web.kill()
            pipe(web.stdout).close()

    def _login_link(self) -> str:
        """A link for the first superuser (made on a fresh install)."""
        user, made = login_user()
        if made:
            self.stderr.write(
                f"First run: made the superuser '{printable(user.get_username())}' (no password; use the login link "
                "below)."
            )
        return login_link_path(user)

    def _announce(self, address: tuple[str, int]) -> None:
        if self.url:  # one line for a server that listens on more than one address
            return
        url = self.url = tool_configs.client_url(*address)
        try:
            tool_configs.record_server_url(url)  # install_hermes_skill and register_claude default to it
        except OSError as exc:
            log.warning(
                "could not record this address in %s (%s): pass --url to install_hermes_skill", settings.DATA_DIR, exc
            )
        self.stdout.write(f"Open this one-time login link (valid 1 hour): {printable(url)}{self.login_path}")
        self.stdout.write(f"Bridge is listening on {printable(url)}/")
        roots = ", ".join(printable(root) for root in settings.BRIDGE_ALLOWED_ROOTS)
        self.stdout.write(
            f"  data: {printable(settings.DATA_DIR)}   allowed roots: {roots}"
            f"   web processes: {len(self.web_processes) or 1}"
        )
        sys.stdout.flush()


def pipe(stream: IO[bytes] | None) -> IO[bytes]:
    """A web process's stdin or stdout: always a pipe (`processes.spawn_sharing` makes both)."""
    if stream is None:
        raise RuntimeError("a web process without its pipe")
    return stream


class Stopping:
    """Ctrl-C, SIGTERM or Ctrl-Break, the first time: stop claiming and let running tasks finish while Bridge goes on
    serving, so a person can still answer the ones that wait for a decision; stop serving once they are done (or
    BRIDGE_DRAIN_S has passed and the rest are cancelled). The second time: cancel them now, saying why."""

    def __init__(
        self,
        command: Command,
        supervisor: Supervisor | None,
        thread: threading.Thread | None,
        stop_serving: Callable[[], None],
    ) -> None:
        self.command, self.supervisor, self.thread, self.stop_serving = command, supervisor, thread, stop_serving

    def drain(self, name: str) -> None:
        if self.supervisor is None or self.thread is None:
            self.command.stderr.write(f"Bridge: {name} received: stopped serving.")
            self.stop_serving()
            return
        drain_args = (name, self.supervisor, self.thread)
        threading.Thread(target=self._drain_then_stop, args=drain_args, name="drain", daemon=True).start()

    def now(self, name: str) -> None:
        self.command.stderr.write(f"Bridge: {name} received again: cancelling the running tasks now…")
        if self.supervisor is None:
            self.stop_serving()
        else:
            self.supervisor.stop_now()

    def _drain_then_stop(self, name: str, supervisor: Supervisor, thread: threading.Thread) -> None:
        try:
            self.command.stderr.write(self.drain_message(name, supervisor))
        except DatabaseError as exc:  # the message only; the drain itself needs no database to begin
            log.warning("could not list the running tasks: %s", exc)
        finally:
            connections.close_all()
        supervisor.request_stop()
        thread.join()
        self.command.stderr.write("Bridge: every task has ended; stopped serving.")
        self.stop_serving()

    def drain_message(self, name: str, supervisor: Supervisor) -> str:
        tasks = supervisor.running_tasks()
        if not tasks:
            return f"Bridge: {name} received: no task is running; stopping."
        waiting = PermissionRequest.objects.pending().filter(task__in=tasks).values_list("task__public_id", flat=True)
        links = [f"{printable(self.command.url)}/tasks/{public_id}/" for public_id in dict.fromkeys(waiting)]
        lines = [
            f"Bridge: {name} received: no new task starts (queued ones wait for the next start). {len(tasks)} running "
            f"task(s) may finish within BRIDGE_DRAIN_S={settings.BRIDGE_DRAIN_S} s, and this server serves until "
            "they have; the rest are then cancelled, saying why."
        ]
        if links:
            lines.append(f"  {len(links)} wait for a decision; answer them now at: " + " ".join(links))
        lines.append("  Ctrl-C again cancels them now.")
        return "\n".join(lines)
