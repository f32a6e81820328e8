"""What is known about the Hermes install without starting it: its executable, its version, its skill library.

Running `hermes --version` checks for updates online and starting Hermes takes seconds, so everything here reads
files: the package metadata next to the executable's interpreter, and $HERMES_HOME/skills/**/SKILL.md (or the index
Hermes writes of them).
"""

import importlib.metadata
import json
import shutil
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

HERMES_DIST = "hermes-agent"


def hermes_executable() -> Path | None:
    """BRIDGE_HERMES_BIN as a path or a name on PATH; None when it is not there."""
    found = shutil.which(settings.BRIDGE_HERMES_BIN)
    return Path(found) if found else None


def site_packages(executable: Path) -> list[Path]:
    """Where the executable's own environment keeps its packages (it may live in another venv)."""
    venvs = {executable.parent.parent, executable.resolve().parent.parent}
    try:
        first_line = executable.read_bytes()[:200].splitlines()[0].decode()
        if first_line.startswith("#!"):
            venvs.add(Path(first_line[2:].strip().split()[0]).parent.parent)
    except (OSError, IndexError, UnicodeDecodeError):
        pass
    return [site for venv in venvs for site in venv.glob("lib/python*/site-packages")]


def acp_installed(executable: str) -> bool:
    """Whether the Python environment behind this executable has the ACP extra (`hermes-agent[acp]`).

    Looked up on disk, never by running Hermes.
    """
    found = shutil.which(executable)
    if not found:
        return False
    return any((site / "acp" / "__init__.py").exists() for site in site_packages(Path(found)))


# Hermes' newest session in a directory, in the order `hermes chat --continue` takes (hermes_state.py
# search_sessions, Hermes 0.19): last message, then start. Only sessions started at a terminal (source "cli") record
# their cwd.
NEWEST_IN_CWD = """
    SELECT s.id FROM sessions s
    LEFT JOIN (SELECT session_id, MAX(timestamp) AS last_active FROM messages GROUP BY session_id) m
        ON m.session_id = s.id
    WHERE s.cwd = ?
    ORDER BY COALESCE(m.last_active, s.started_at) DESC, s.started_at DESC, s.id DESC
    LIMIT 1
"""


def session_store(home: Path | None = None) -> Path:
    """Hermes' own session store: $HERMES_HOME/state.db."""
    return Path(home or settings.BRIDGE_HERMES_HOME) / "state.db"


def _first_in_store(sql: str, value: str, home: Path | None) -> list[tuple] | None:
    """The first row `sql` selects from Hermes' store (read-only, without starting Hermes), in a list (empty when it
    selects none); None when there is no store this process can read."""
    try:
        with closing(sqlite3.connect(f"{session_store(home).as_uri()}?mode=ro", uri=True, timeout=5)) as db:
            return db.execute(sql, (value,)).fetchmany(1)
    except sqlite3.Error:
        return None


def hermes_session_source(session_id: str, home: Path | None = None) -> str | None:
    """Where Hermes says a session came from ("acp", "cli", …), read from its own store: "" when the store has no
    such session, None when there is no store to ask. Hermes' ACP server reopens only sessions it created itself; the
    others resume in one-shot mode."""
    rows = _first_in_store("SELECT source FROM sessions WHERE id = ?", session_id, home)
    if rows is None:
        return None
    return str(rows[0][0] or "unknown") if rows else ""


def hermes_newest_session(cwd: str, home: Path | None = None) -> str | None:
    """The newest session Hermes recorded in `cwd`, read from its own store: "" when it recorded none there, None
    when there is no store to ask."""
    rows = _first_in_store(NEWEST_IN_CWD, cwd, home)
    if rows is None:
        return None
    return str(rows[0][0]) if rows else ""


def hermes_version(executable: Path) -> str | None:
    """The installed hermes-agent version from its package metadata, or None when it cannot be found."""
    for dist in importlib.metadata.distributions(name=HERMES_DIST, path=[str(d) for d in site_packages(executable)]):
        return dist.version
    return None


@dataclass
class Skill:
    name: str
    category: str
    description: str
    tags: list[str] = field(default_factory=list)


@dataclass
class SkillLibrary:
    categories: dict[str, str]  # category -> its DESCRIPTION.md blurb
    skills: list[Skill]
    problems: list[str]  # files that could not be read, said rather than hidden


def _front_matter(text: str) -> dict:
    if not text.startswith("---"):
        return {}
    head, sep, _ = text[3:].partition("\n---")
    if not sep:
        return {}
    data = yaml.safe_load(head)
    return data if isinstance(data, dict) else {}


def _from_snapshot(snapshot: Path) -> SkillLibrary:
    """Hermes' own index, written when it starts (no tags in it)."""
    try:
        data = json.loads(snapshot.read_text())
        entries = data.get("skills") or []
        categories = {str(k): str(v) for k, v in (data.get("category_descriptions") or {}).items()}
    except (OSError, ValueError, AttributeError) as exc:
        return SkillLibrary({}, [], [f"{snapshot}: {exc.__class__.__name__}"])
    skills = [
        Skill(
            name=str(entry.get("frontmatter_name") or entry.get("skill_name") or "?"),
            category=str(entry.get("category") or "general"),
            description=" ".join(str(entry.get("description") or "").split()),
        )
        for entry in entries
        if isinstance(entry, dict)
    ]
    for skill in skills:
        categories.setdefault(skill.category, "")
    return SkillLibrary(categories, skills, [])


def read_library(home: Path | None = None) -> SkillLibrary:
    """Every skill under $HERMES_HOME/skills (its category is its folder, as Hermes names it), else Hermes' index
    $HERMES_HOME/.skills_prompt_snapshot.json."""
    home = home or settings.BRIDGE_HERMES_HOME
    skills_dir = home / "skills"
    if not skills_dir.is_dir():
        snapshot = home / ".skills_prompt_snapshot.json"
        if snapshot.is_file():
            return _from_snapshot(snapshot)
        return SkillLibrary({}, [], [f"no skill library at {skills_dir}"])
    categories: dict[str, str] = {}
    skills: list[Skill] = []
    problems: list[str] = []
    for blurb in sorted(skills_dir.glob("**/DESCRIPTION.md")):
        categories["/".join(blurb.parent.relative_to(skills_dir).parts)] = blurb.read_text(errors="replace").strip()
    for skill_file in sorted(skills_dir.glob("**/SKILL.md")):
        parts = skill_file.parent.relative_to(skills_dir).parts
        category = "/".join(parts[:-1]) if len(parts) > 1 else parts[0]
        categories.setdefault(category, "")
        try:
            meta = _front_matter(skill_file.read_text(errors="replace"))
        except (OSError, yaml.YAMLError) as exc:
            problems.append(f"{skill_file}: {exc.__class__.__name__}")
            continue
        tags = ((meta.get("metadata") or {}).get("hermes") or {}).get("tags") or []
        skills.append(
            Skill(
                name=str(meta.get("name") or skill_file.parent.name),
                category=category,
                description=" ".join(str(meta.get("description") or "").split()),
                tags=[str(t) for t in tags] if isinstance(tags, list) else [],
            )
        )
    return SkillLibrary(categories, skills, problems)


def search(library: SkillLibrary, query: str = "", category: str = "") -> list[Skill]:
    """Skills in `category` (exact, case-insensitive) whose name, description or tags contain every query word."""
    words = query.lower().split()
    found = []
    for skill in library.skills:
        if category and skill.category.lower() != category.lower():
            continue
        haystack = " ".join([skill.name, skill.description, *skill.tags]).lower()
        if all(word in haystack for word in words):
            found.append(skill)
    return found


# Options only one-shot Hermes (`hermes chat`) can take: a task that sets one runs one-shot.
ONESHOT_ONLY_OPTIONS = ("skills", "toolsets", "max_turns")


def run_mode(options: Mapping[str, Any], resume_session_id: str | None) -> str:
    """`acp` or `oneshot` for a Hermes task, from BRIDGE_HERMES_MODE, its options and what is installed."""
    mode = settings.BRIDGE_HERMES_MODE
    if mode in ("acp", "oneshot"):
        return mode
    if any(options.get(name) for name in ONESHOT_ONLY_OPTIONS):
        return "oneshot"
    if resume_session_id and hermes_session_source(resume_session_id) not in (None, "", "acp"):
        return "oneshot"  # Hermes' ACP server reopens only the sessions it created itself
    return "acp" if acp_installed(settings.BRIDGE_HERMES_BIN) else "oneshot"
