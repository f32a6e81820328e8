"""`manage.py runbridge`: Daphne (REST, SSE, pages, admin) and the supervisor in one process — the embedded default.

It prints a one-time login link for the browser, so a newcomer needs no password to get in.
"""

import argparse
import logging
import os
import socket
import subprocess
import sys
import threading

from daphne.endpoints import build_endpoint_description_strings
from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor
from twisted.internet import reactor

from bridge.asgi import application
from jobs import executors, integrations, processes
from jobs.auth import login_link_path, login_user
from jobs.hints import manage_command
from jobs.models import PermissionRequest
from jobs.supervisor import Supervisor
from jobs.webserver import FlowControlledServer

log = logging.getLogger("jobs")


class ListeningServer(FlowControlledServer):
    """Daphne's server, keeping why it could not listen (Daphne itself only logs it and exits 0)."""

    listen_failure = ""

    def listen_error(self, failure) -> None:
        self.listen_failure = failure.getErrorMessage()
        super().listen_error(failure)


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
    """The Twisted endpoint that adopts the IPv4 socket `listener`, in this process and in the helpers that inherit it
    (Daphne's `fd` endpoint parser takes no other address family)."""
    return f"fd:fileno={listener.fileno()}"


def check_database() -> None:
    """Fail with what to do, not a traceback, when the database is unreachable or not migrated (a fresh data dir)."""
    connection = connections[DEFAULT_DB_ALIAS]
    try:
        executor = MigrationExecutor(connection)
        unapplied = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        raise CommandError(f"cannot use the database ({exc}): is it running, and is DATABASE_URL right?") from None
    if unapplied:
        raise CommandError(
            f"the database has {len(unapplied)} migration(s) to apply: run {manage_command('migrate')} "
            "(`make run` does it for you), then start Bridge again"
        )


def port_taken(host: str, port: int, reason: str) -> str:
    return (
        f"cannot listen on {host}:{port}: {reason}. Is Bridge (or another server) already running there? "
        f"Stop it, or use another port: `make run PORT={port + 1}` "
        f"(or {manage_command('runbridge', '--port', str(port + 1))})"
    )


class Command(BaseCommand):
    help = "Serve Bridge on 127.0.0.1 and run its tasks. SIGTERM, Ctrl-C or Ctrl-Break: drain while serving, then exit."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8800, help="port (default 8800; 0 picks a free one)")
        parser.add_argument("--no-supervisor", action="store_true", help="serve only; run tasks elsewhere")
        parser.add_argument("--inherited-endpoint", help=argparse.SUPPRESS)  # a helper: serve the parent's socket

    def handle(self, *args, host, port, no_supervisor, inherited_endpoint, **options):
        if inherited_endpoint:
            return self._serve_as_helper(inherited_endpoint)
        self.helpers: list[subprocess.Popen] = []
        sharing = settings.BRIDGE_WEB_PROCESSES > 1 and processes.can_share_listening_socket() and ":" not in host
        listener = bind(host, port) if sharing else None
        if listener is None:
            check_port_free(host, port)
        check_database()
        self.login_path = self._login_link()
        connections.close_all()  # this thread only waits from here on: give its connection (a pool slot) back
        supervisor, thread = (None, None) if no_supervisor else self._start_supervisor()
        if listener is None:
            endpoints = build_endpoint_description_strings(host=host, port=port)
            endpoints = [f"{endpoint}:backlog={settings.BRIDGE_LISTEN_BACKLOG}" for endpoint in endpoints]
        else:
            endpoints = [shared_endpoint(listener)]
            self.helpers = [self._start_helper(listener) for _ in range(1, settings.BRIDGE_WEB_PROCESSES)]
            listener.detach()  # Twisted adopts the descriptor, and closes it once it has its own copy
        server = ListeningServer(
            application=ASGIStaticFilesHandler(application),
            endpoints=endpoints,
            signal_handlers=False,  # ours, below: the first stop drains while this server goes on serving
            verbosity=0,
            ready_callable=lambda: reactor.callWhenRunning(self._announce, server),
            shares_socket=listener is not None,
        )
        self.url = ""
        stopping = Stopping(self, supervisor, thread)
        with processes.on_stop_signals(
            lambda name: reactor.callFromThread(stopping.drain, name),
            lambda name: reactor.callFromThread(stopping.now, name),
        ):
            server.run()
        self._stop_helpers()
        if thread is not None and thread.is_alive():  # the server stopped by itself (it could not listen)
            supervisor.request_stop()
            thread.join()
        if server.listen_failure:
            raise CommandError(port_taken(host, port, server.listen_failure))

    def _start_supervisor(self) -> tuple[Supervisor, threading.Thread]:
        self.stderr.write("\n".join(executors.startup_lines(executors.executor_report())))
        supervisor = Supervisor()
        thread = threading.Thread(target=supervisor.run, name="supervisor", daemon=True)
        thread.start()
        if not supervisor.ready.wait(timeout=60):
            raise CommandError("the supervisor did not start within 60 s (is the database reachable?)")
        if supervisor.startup_error:
            raise CommandError(f"{supervisor.startup_error}. Did you run {manage_command('migrate')}?")
        return supervisor, thread

    def _start_helper(self, listener: socket.socket) -> subprocess.Popen:
        """Another web process: it serves this one's socket and stops when this one closes its stdin (or dies)."""
        argv = [sys.executable, str(settings.BASE_DIR / "manage.py"), "runbridge", "--no-supervisor"]
        argv += ["--inherited-endpoint", shared_endpoint(listener)]
        return processes.spawn_sharing(argv, listener.fileno(), env=os.environ.copy(), cwd=str(settings.BASE_DIR))

    def _stop_helpers(self) -> None:
        for helper in self.helpers:
            helper.stdin.close()
        for helper in self.helpers:
            try:
                helper.wait(timeout=15)
            except subprocess.TimeoutExpired:
                log.warning("web process %d did not stop within 15 s; killing it", helper.pid)
                helper.kill()

    def _serve_as_helper(self, endpoint: str) -> None:
        """A helper web process: the parent's socket, no supervisor, no messages; stops when its stdin closes."""
        server = FlowControlledServer(
            application=ASGIStaticFilesHandler(application),
            endpoints=[endpoint],
            signal_handlers=False,
            verbosity=0,
            shares_socket=True,
        )

        def stop_when_the_parent_does() -> None:
            sys.stdin.buffer.read()  # returns at EOF: the parent closed the pipe, or died
            reactor.callFromThread(reactor.stop)

        threading.Thread(target=stop_when_the_parent_does, name="parent-watch", daemon=True).start()
        with processes.on_stop_signals(lambda name: reactor.callFromThread(reactor.stop)):
            server.run()

    def _login_link(self) -> str:
        """A link for the first superuser (made on a fresh install)."""
        user, made = login_user()
        if made:
            self.stderr.write(
                f"First run: made the superuser '{user.get_username()}' (no password; use the login link below)."
            )
        return login_link_path(user)

    def _announce(self, server: ListeningServer) -> None:
        if not server.listening_addresses:
            reactor.callLater(0.05, self._announce, server)
            return
        host, port = server.listening_addresses[0]
        url = integrations.client_url(host, port)
        try:
            integrations.record_server_url(url)  # install_hermes_skill and register_claude default to it
        except OSError as exc:
            log.warning(
                "could not record this address in %s (%s): pass --url to install_hermes_skill", settings.DATA_DIR, exc
            )
        self.url = url
        self.stdout.write(f"Open this one-time login link (valid 1 hour): {url}{self.login_path}")
        self.stdout.write(f"Bridge is listening on {url}/")
        self.stdout.write(
            f"  data: {settings.DATA_DIR}   allowed roots: {', '.join(map(str, settings.BRIDGE_ALLOWED_ROOTS))}"
            f"   web processes: {1 + len(self.helpers)}"
        )
        sys.stdout.flush()


class Stopping:
    """Ctrl-C, SIGTERM or Ctrl-Break, the first time: stop claiming and let running tasks finish while the server goes
    on serving, so a person can still answer the ones that wait for a decision; stop serving once they are done (or
    BRIDGE_DRAIN_S has passed and the rest are cancelled). The second time: cancel them now, saying why."""

    def __init__(self, command: Command, supervisor: Supervisor | None, thread: threading.Thread | None) -> None:
        self.command, self.supervisor, self.thread = command, supervisor, thread

    def drain(self, name: str) -> None:
        if self.supervisor is None:
            self.command.stderr.write(f"Bridge: {name} received: stopped serving.")
            reactor.stop()
            return
        threading.Thread(target=self._drain_then_stop, args=(name,), name="drain", daemon=True).start()

    def now(self, name: str) -> None:
        self.command.stderr.write(f"Bridge: {name} received again: cancelling the running tasks now…")
        if self.supervisor is None:
            reactor.stop()
        else:
            self.supervisor.stop_now()

    def _drain_then_stop(self, name: str) -> None:
        try:
            self.command.stderr.write(self.drain_message(name))
        except DatabaseError as exc:  # the message only; the drain itself needs no database to begin
            log.warning("could not list the running tasks: %s", exc)
        finally:
            connections.close_all()
        self.supervisor.request_stop()
        self.thread.join()
        self.command.stderr.write("Bridge: every task has ended; stopped serving.")
        reactor.callFromThread(reactor.stop)

    def drain_message(self, name: str) -> str:
        tasks = self.supervisor.running_tasks()
        if not tasks:
            return f"Bridge: {name} received: no task is running; stopping."
        waiting = PermissionRequest.objects.pending().filter(task__in=tasks).values_list("task__public_id", flat=True)
        links = [f"{self.command.url}/tasks/{public_id}/" for public_id in dict.fromkeys(waiting)]
        lines = [
            f"Bridge: {name} received: no new task starts (queued ones wait for the next start). {len(tasks)} running "
            f"task(s) may finish within BRIDGE_DRAIN_S={settings.BRIDGE_DRAIN_S} s, and this server serves until "
            "they have; the rest are then cancelled, saying why."
        ]
        if links:
            lines.append(f"  {len(links)} wait for a decision; answer them now at: " + " ".join(links))
        lines.append("  Ctrl-C again cancels them now.")
        return "\n".join(lines)
