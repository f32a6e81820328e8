"""Benchmark (`make bench`; not collected by pytest): what the user's permission rules add to a permission request
(issue 31: "Rule evaluation adds ≤ 0.2 ms p50 to a permission request with 1,000 rules, side by side with no rules").

    .venv/bin/python tests/bench/rules_overhead.py [--rounds 40] [--per-round 5] [--changes 30]

Times the whole `actions.record_permission_request` call, as an agent's request pays it: the rules' stamp read, the
book's candidates and the decision (jobs/actions/rules.py), the request's row and its events committed. Two SQLite
databases in one temporary data dir: one with 1,000 live rules and a task, one with none and two tasks (one in bypass
mode); the three tasks have the same cwd, agent, creator and a linked agent session. Each round times --per-round
requests of every kind (kinds taking turns request by request) from each task in turn, the task that goes first
rotating, so this machine's drift hits all alike; a switch of database is followed by one untimed request of every
kind (it rebuilds the book: the stamp differs). Every request is checked: with rules each kind is decided as the
probe says, without them each is pending, in bypass mode allowed.

The 1,000 rules (TARGETS and the seeded MIX) are a user's after months: Bash allow rules over 80 command words in
every form (exact, `:*` prefix, trailing ` *`, a `*` inside, a few with no command word), deny and ask rules for
dangerous commands, Read/Edit globs, WebFetch domains (some `*.` wildcards), MCP servers and tool globs, a few whole
tools and Agent rules; 40 % for everywhere and the rest spread over 16 roots (two hold the task's cwd), some for one
agent or one creator, about 3 % remembered for one task or its agent session, 5 % expiring.

The request kinds (`probes`): a Bash command that no rule matches (a git command: many git rules to try), one an allow
rule matches, a compound command that allow rules approve together, a Read of a file below the cwd, a WebFetch URL,
an MCP tool, and an MCP tool that meets no rule (what 1,000 rules cost a request before any is matched). A row per
kind carries the goal: the added p50, 1,000 rules − none. Its note gives, for a kind the rules decide, a request
decided on arrival without rules (bypass mode): a decided request writes more than a pending one, and that is part of
what the rules add. A last row is the first request after a rule change (--changes times a rule added, and removed
again, through `actions.add_rule` / `remove_rule`, untimed): the process rebuilds its book from the database; not the
steady state, but a user pays it after every change.
"""

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.table import Row, emit, ms, p50, percentile  # noqa: E402

if TYPE_CHECKING:
    from jobs.models import AgentSession, PermissionRequest, Task

GOAL_MS = 0.2
RULES = 1000
SEED = 31
CREATOR = "token:planner"
ROOTS = (*(f"proj-{number:02}" for number in range(12)), *(f"proj-{number:02}/pkg" for number in range(4)))
TASK_ROOT = "proj-03/pkg"  # the measured tasks' cwd: under the roots proj-03 and proj-03/pkg


def listed(text: str, separator: str | None = None) -> tuple[str, ...]:
    """A vocabulary written as one string: the bench's are long."""
    return tuple(text.split(separator))


COMMANDS = listed(
    "git npm pnpm yarn npx node python python3 pip uv pytest ruff mypy make cargo rustc go gofmt docker "
    "docker-compose kubectl helm terraform aws gcloud az ls cat head tail grep rg find fd sed awk jq yq curl wget tar "
    "zip unzip cp mv mkdir touch chmod ln echo printf env which whoami ps du df diff sort uniq wc tee less gh psql "
    "sqlite3 redis-cli mvn gradle java javac dotnet bundle rake rails ruby php composer deno bun tsc eslint prettier "
    "jest vitest"
)
ARGUMENTS = listed("status diff log show build test run lint check install list fmt version --help -la src main --all")
DANGEROUS = listed(
    "rm -rf *|git push --force *|git push -f *|git reset --hard *|git clean -fdx *|sudo *|chmod -R 777 *|dd *|"
    "mkfs *|shutdown *|docker system prune *|kubectl delete *|terraform destroy *|npm publish *|aws s3 rm *",
    "|",
)
ASKED = listed(
    "git push *|git rebase *|docker rm *|docker run *|kubectl apply *|terraform apply *|helm upgrade *|"
    "gh pr merge *|npm install *|pip install *",
    "|",
)
DIRECTORIES = listed("src lib docs tests scripts config assets app pkg internal cmd web api tools examples")
EXTENSIONS = listed("py ts js md go rs json yaml toml css")
PATH_FORMS = listed(
    "Read({d}/**) Edit({d}/**) Edit({d}/**/*.{e}) Read(*.{e}) Read(//usr/share/{d}/**) Edit(/{d}/*.{e}) "
    "Read(./{d}/README.md)"
)
SECRETS = listed(
    "Read(.env) Read(.env.*) Read(~/.ssh/**) Read(~/.aws/**) Read(//etc/shadow) Edit(**/*.lock) Read(secrets/**) "
    "Edit(.git/**) Read(**/*.pem) Read(**/id_rsa)"
)
GUARDED = ("Edit(migrations/**)", "Edit(/.github/**)", "Edit(package.json)", "Edit(pyproject.toml)", "Edit(Dockerfile)")
SITES = listed(
    "docs.python.org developer.mozilla.org github.com raw.githubusercontent.com pypi.org www.npmjs.com crates.io "
    "docs.rs go.dev pkg.go.dev stackoverflow.com docs.djangoproject.com react.dev nodejs.org kubernetes.io "
    "docs.docker.com learn.microsoft.com cloud.google.com docs.aws.amazon.com en.wikipedia.org"
)
SERVERS = listed("github gitlab slack linear jira notion sentry postgres filesystem puppeteer playwright figma stripe")
OTHERS = ("WebSearch", "TodoWrite", "Glob", "Grep", "Agent(Explore)", "Agent(Plan)", "Agent(general-purpose)")


@dataclass(frozen=True)
class Probe:
    """A request kind: the tool call, and how 1,000 rules decide it (without rules every kind is pending)."""

    tool_name: str
    tool_input: dict
    with_rules: str  # the status expected with the rules


def probes(cwd: str) -> dict[str, Probe]:
    return {
        "Bash, no rule matches": Probe("Bash", {"command": "git bisect start HEAD~3"}, "pending"),
        "Bash, an allow rule matches": Probe("Bash", {"command": "npm run test -- --coverage"}, "allowed"),
        "Bash, compound, allowed part by part": Probe(
            "Bash", {"command": "git status && npm run lint && ls -la src"}, "allowed"
        ),
        "Read of a file below the cwd": Probe("Read", {"file_path": f"{cwd}/src/app/models.py"}, "allowed"),
        "WebFetch of a URL": Probe(
            "WebFetch", {"url": "https://docs.python.org/3/library/re.html", "prompt": "the flags"}, "allowed"
        ),
        "MCP tool": Probe("mcp__github__get_issue", {"owner": "o", "repo": "r", "issue_number": 31}, "allowed"),
        "MCP tool of a server no rule names": Probe("mcp__weather__forecast", {"city": "Oslo"}, "pending"),
    }


# The rules the probes meet, besides what the mix holds: (pattern, decision, root).
TARGETS = (
    ("Bash(npm run test:*)", "allow", "proj-03"),
    ("Bash(git status)", "allow", ""),
    ("Bash(npm run lint)", "allow", ""),
    ("Bash(ls *)", "allow", ""),
    ("Read(src/**)", "allow", "proj-03"),
    ("WebFetch(domain:docs.python.org)", "allow", ""),
    ("mcp__github__get_*", "allow", ""),
)


# --- the rules ------------------------------------------------------------------------------------------------------


def bash_allow(rng: random.Random) -> str:
    word, argument = rng.choice(COMMANDS), rng.choice(ARGUMENTS)
    if rng.random() < 0.01:
        return f"Bash(* {argument})"  # no command word: such a rule meets every command
    form = rng.choices(("{w} {a}", "{w} {a}:*", "{w} {a} *", "{w} * {a}"), (40, 25, 25, 10))[0]
    return f"Bash({form.format(w=word, a=argument)})"


def path_allow(rng: random.Random) -> str:
    return rng.choice(PATH_FORMS).format(d=rng.choice(DIRECTORIES), e=rng.choice(EXTENSIONS))


def domain_allow(rng: random.Random) -> str:
    site = rng.choice(SITES) if rng.random() < 0.3 else f"docs.{rng.choice(COMMANDS)}.{rng.choice(('dev', 'io'))}"
    return f"WebFetch(domain:*.{site.partition('.')[2]})" if rng.random() < 0.2 else f"WebFetch(domain:{site})"


def mcp_allow(rng: random.Random) -> str:
    server = rng.choice(SERVERS)
    return rng.choice((f"mcp__{server}", f"mcp__{server}__{rng.choice(('get', 'list', 'search'))}_*"))


def fixed(choices: tuple[str, ...], shape: str = "{}") -> Callable[[random.Random], str]:
    return lambda rng: shape.format(rng.choice(choices))


# (how many, decision, a pattern drawn at random): 1,000 rules with TARGETS.
MIX: tuple[tuple[int, str, Callable[[random.Random], str]], ...] = (
    (553, "allow", bash_allow),
    (40, "deny", fixed(DANGEROUS, "Bash({})")),
    (20, "ask", fixed(ASKED, "Bash({})")),
    (150, "allow", path_allow),
    (20, "deny", fixed(SECRETS)),
    (10, "ask", fixed(GUARDED)),
    (100, "allow", domain_allow),
    (5, "deny", fixed(("pastebin.com", "*.ngrok.io", "transfer.sh"), "WebFetch(domain:{})")),
    (5, "ask", fixed(("*.internal.example.com", "localhost"), "WebFetch(domain:{})")),
    (50, "allow", mcp_allow),
    (10, "deny", fixed(SERVERS, "mcp__{}__delete_*")),
    (10, "ask", fixed(SERVERS, "mcp__{}__create_*")),
    (20, "allow", fixed(OTHERS)),
)


@dataclass
class Scopes:
    """What a rule's scope can name: the work root, and the measured task (for rules remembered for it or its
    session) beside another task."""

    work: Path
    task: "Task"
    session: "AgentSession"
    other_task: "Task"

    def draw(self, rng: random.Random) -> dict:
        """A rule's scope: 40 % everywhere, else one of ROOTS; some for one agent or one creator; about 3 %
        remembered for one task or agent session (as `remember` scopes them); 5 % expiring in a month."""
        from django.utils import timezone

        expires = {"expires_at": timezone.now() + timedelta(days=30)} if rng.random() < 0.05 else {}
        kind = rng.random()
        if kind < 0.015:
            task = self.task if rng.random() < 0.5 else self.other_task
            return {"root": task.cwd, "task": task, **expires}
        if kind < 0.03:
            return {"root": self.task.cwd, "agent": "claude", "session": self.session, **expires}
        root = "" if rng.random() < 0.4 else str(self.work / rng.choice(ROOTS))
        agent = rng.choices(("", "claude", "hermes"), (80, 10, 10))[0]
        created_for = rng.choices(("", CREATOR, "token:ci", "user:alice"), (85, 5, 5, 5))[0]
        return {"root": root, "agent": agent, "created_for": created_for, **expires}


def add_rules(scopes: Scopes) -> int:
    """TARGETS and the seeded MIX, each through `actions.add_rule` (checked as any rule is)."""
    from jobs import actions

    rng = random.Random(SEED)
    for pattern, decision, root in TARGETS:
        actions.add_rule(pattern, decision, root=str(scopes.work / root) if root else "", by="bench")
    for count, decision, drawn in MIX:
        for _ in range(count):
            message = "not here: ask the user first" if decision == "deny" else ""
            actions.add_rule(drawn(rng), decision, message=message, by="bench", **scopes.draw(rng))
    return len(TARGETS) + sum(count for count, _, _ in MIX)


# --- the sides ------------------------------------------------------------------------------------------------------


@dataclass
class Side:
    """A task in one database, and the seconds each kind's requests took: `rules` (1,000 rules), `none` (no rules,
    every request left pending), `bypass` (no rules, in bypass mode: every request decided on arrival, the same
    writes as a request a rule decides, without any rule read)."""

    name: str
    database: str
    task: "Task"
    times: dict[str, list[float]] = field(default_factory=dict)
    requests: int = 0


def setup_django(tmp: Path) -> Path:
    """Django on a fresh data dir whose allowed root is `tmp/work`, holding every root the rules name."""
    work = tmp / "work"
    for root in ROOTS:
        (work / root).mkdir(parents=True, exist_ok=True)
    os.environ.update(
        DJANGO_SETTINGS_MODULE="bridge.settings",
        BRIDGE_DATA_DIR=str(tmp / "data"),
        BRIDGE_ALLOWED_ROOTS=str(work),
        BRIDGE_LOG_LEVEL="WARNING",
    )
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    return work.resolve()


def migrated(database: str) -> None:
    from django.core.management import call_command

    from tests.bench.dashboard import use_database

    use_database(database)
    call_command("migrate", verbosity=0, interactive=False)


def side_in(database: str, name: str, work: Path, mode: str = "approve") -> tuple[Side, "AgentSession"]:
    """A side whose task is made in `database` (migrated), with the agent session it runs in linked as the recorder
    links it."""
    from jobs import actions
    from tests.bench.dashboard import use_database

    use_database(database)
    spec = actions.TaskSpec(
        prompt="the measured task", cwd=str(work / TASK_ROOT), created_by=CREATOR, permission_mode=mode
    )
    task = actions.create_task(spec)
    return Side(name, database, task), actions.link_session(task, f"bench-session-{name}")


def side_with_rules(database: str, work: Path) -> Side:
    """The rules side: its task, another task, and the rules (some remembered for either task or the session)."""
    from jobs import actions

    side, session = side_in(database, "rules", work)
    other = actions.create_task(actions.TaskSpec(prompt="another task", cwd=str(work / "proj-05")))
    if add_rules(Scopes(work, side.task, session, other)) != RULES:
        raise SystemExit(f"the mix holds {sum(count for count, _, _ in MIX) + len(TARGETS)} rules, not {RULES}")
    return side


def request(side: Side, probe: Probe) -> tuple[float, "PermissionRequest"]:
    """One request of `probe`'s kind from the side's task, timed."""
    from jobs import actions

    side.requests += 1
    started = time.perf_counter()
    perm = actions.record_permission_request(
        side.task, request_id=f"r{side.requests}", tool_name=probe.tool_name, tool_input=probe.tool_input
    )
    return time.perf_counter() - started, perm


def checked(side: Side, kind: str, probe: Probe, perm: "PermissionRequest") -> None:
    """The request was answered as this side answers it: by the rules as the probe says, pending, or allowed."""
    expected = {"rules": probe.with_rules, "none": "pending", "bypass": "allowed"}[side.name]
    by_rule = side.name == "rules" and expected != "pending"
    if perm.status != expected or (perm.rule_id is not None) != by_rule:
        raise SystemExit(f"{side.name}: {kind} was {perm.status} (rule {perm.rule_id}), not {expected} as it should be")


def switch_to(side: Side, kinds: dict[str, Probe]) -> None:
    """Use the side's database; one untimed request of every kind rebuilds the book (the stamp differs)."""
    from tests.bench.dashboard import use_database

    use_database(side.database)
    for kind, probe in kinds.items():
        checked(side, kind, probe, request(side, probe)[1])


def measure(sides: list[Side], kinds: dict[str, Probe], rounds: int, per_round: int) -> None:
    """`rounds` rounds, each side in turn (the order rotating), `per_round` requests of every kind a side."""
    for number in range(rounds):
        for side in sides[number % len(sides) :] + sides[: number % len(sides)]:
            switch_to(side, kinds)
            for _ in range(per_round):
                for kind, probe in kinds.items():
                    took, perm = request(side, probe)
                    checked(side, kind, probe, perm)
                    side.times.setdefault(kind, []).append(took)


def after_changes(side: Side, kind: str, probe: Probe, work: Path, changes: int) -> list[float]:
    """The first request after each rule change, `changes` times a rule added and removed again (untimed)."""
    from jobs import actions
    from tests.bench.dashboard import use_database

    def first() -> float:
        took, perm = request(side, probe)
        checked(side, kind, probe, perm)
        return took

    use_database(side.database)
    firsts = []
    for number in range(changes):
        made = actions.add_rule(f"Bash(bench-tool-{number} run)", "allow", root=str(work / "proj-03"), by="bench")
        firsts.append(first())
        actions.remove_rule(made.pk, by="bench")
        firsts.append(first())
    return firsts


# --- the table ------------------------------------------------------------------------------------------------------


def spread(seconds: list[float]) -> str:
    times = ms(seconds)
    return f"p50 {p50(times):.3f}, p90 {percentile(times, 0.90):.3f}, p95 {percentile(times, 0.95):.3f} ms"


def kind_rows(kinds: dict[str, Probe], rules: Side, none: Side, bypass: Side) -> list[Row]:
    """A row per kind: the added p50 against the goal; in its note each side's p50, p90 and p95, and for a kind the
    rules decide, a request decided without rules (bypass): its writes are part of what the rules add."""
    rows = []
    for kind, probe in kinds.items():
        decided = f"; decided without rules (bypass) p50 {p50(ms(bypass.times[kind])):.3f} ms"
        rows.append(
            Row(
                f"permission request: 1,000 rules − none, {kind}, p50",
                p50(ms(rules.times[kind])) - p50(ms(none.times[kind])),
                goal=GOAL_MS,
                note=f"1,000 rules {spread(rules.times[kind])}; none {spread(none.times[kind])}"
                f"{decided if probe.with_rules != 'pending' else ''}; {len(rules.times[kind])} requests a side",
            )
        )
    return rows


def change_row(firsts: list[float], rules: Side, none: Side, kind: str) -> Row:
    return Row(
        f"permission request: first after a rule change (book of {RULES:,} rules rebuilt) − none, {kind}, p50",
        p50(ms(firsts)) - p50(ms(none.times[kind])),
        note=f"first after a change {spread(firsts)}; steady with rules {spread(rules.times[kind])}; "
        f"{len(firsts)} changes",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--per-round", type=int, default=5, help="requests of each kind a side, each round")
    parser.add_argument("--changes", type=int, default=30, help="rules added and removed for the rebuild row")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bridge-bench-rules-") as tmp:
        work = setup_django(Path(tmp))
        databases = {name: str(Path(tmp) / f"{name}.sqlite3") for name in ("rules", "none")}
        for database in databases.values():
            migrated(database)
        rules = side_with_rules(databases["rules"], work)
        none, _ = side_in(databases["none"], "none", work)
        bypass, _ = side_in(databases["none"], "bypass", work, mode="bypass")
        kinds = probes(rules.task.cwd)
        measure([rules, none, bypass], kinds, args.rounds, args.per_round)
        first_kind = next(iter(kinds))
        firsts = after_changes(rules, first_kind, kinds[first_kind], work, args.changes)
    emit([*kind_rows(kinds, rules, none, bypass), change_row(firsts, rules, none, first_kind)])


if __name__ == "__main__":
    main()
