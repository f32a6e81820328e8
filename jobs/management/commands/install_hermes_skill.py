"""`manage.py install_hermes_skill [--url URL] [--mcp] [--print]`: teach Hermes Agent to delegate to Claude Code
through Bridge's REST API, and optionally register Bridge's MCP server with it."""

import json
import os
from collections.abc import Mapping
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.template.loader import render_to_string

from jobs.agents import registry
from jobs.core.access import Scope
from jobs.core.hints import manage_command
from jobs.core.terminal import printable
from jobs.integrations import tool_configs

SKILL_NAME = "bridge-claude-code"
SKILL_CATEGORY = "software-development"
CATEGORY_DESCRIPTION = (
    "---\ndescription: Skills for writing, reviewing and delegating software work, including to other coding agents.\n"
    "---\n"
)
DEFAULT_URL = tool_configs.DEFAULT_BRIDGE_URL
HERMES_SCOPE = Scope.DECIDE.value  # the narrowest scope that lets Hermes create, cancel and answer permission questions
# An earlier skill is kept here, outside the skill library: Hermes offers every file in a skill's folder to the model.
BACKUP_DIR = "backups"


def hermes_home(home: Path, environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HERMES_HOME") or home / ".hermes").expanduser()


def skill_backup_dir() -> Path:
    """Where an earlier SKILL.md is kept: Bridge's data dir, which Hermes never reads."""
    return settings.DATA_DIR / BACKUP_DIR


def hermes_token_command(scope: str = HERMES_SCOPE) -> str:
    """The command that makes Hermes' token: `decide` by default, since Hermes answers the permission questions of
    the tasks it starts; `--token-scope` names a narrower one."""
    return manage_command("token", "create", "hermes", "--scope", scope)


def render_skill(url: str, token_scope: str = HERMES_SCOPE) -> str:
    token_command = hermes_token_command(token_scope)
    return render_to_string(
        "hermes/bridge_skill.md",
        {
            "skill_name": SKILL_NAME,
            "url": url,
            "token_command": token_command,
            # the front matter's help text, as a YAML double-quoted string (a JSON string is one)
            "token_help": json.dumps(f"Make one on the Bridge host: {token_command}"),
            "allowed_roots": ", ".join(f"`{Path(root).resolve()}`" for root in settings.BRIDGE_ALLOWED_ROOTS),
            "default_cwd": Path(settings.BRIDGE_DEFAULT_CWD).resolve(),
            "other_agents": ", ".join(f"`{name}`" for name in registry.agent_names() if name != "claude"),
        },
    )


class Command(BaseCommand):
    help = (
        f"Write the Hermes skill '{SKILL_NAME}' (Bridge's REST API for delegating to Claude Code) under "
        "$HERMES_HOME/skills; with --mcp also add Bridge's MCP server to $HERMES_HOME/config.yaml."
    )
    # Tests pass a temporary home and environment through call_command; the command line cannot.
    stealth_options = ("home", "environ")

    def add_arguments(self, parser):
        parser.add_argument(
            "--url",
            default=None,
            help=f"where Hermes reaches Bridge (default: where runbridge listens, else {DEFAULT_URL})",
        )
        parser.add_argument(
            "--mcp", action="store_true", help="also add Bridge's MCP server (stdio) to Hermes' mcp_servers"
        )
        parser.add_argument(
            "--print", action="store_true", dest="dry_run", help="show the change for each file; write nothing"
        )
        parser.add_argument(
            "--token-scope",
            choices=[scope.value for scope in Scope],
            default=HERMES_SCOPE,
            help=f"the scope of the token the skill tells you to make (default {HERMES_SCOPE}: Hermes answers "
            "permission questions; run: it only creates, resumes and cancels; read: it only follows tasks)",
        )

    def handle(self, *args, url: str | None, mcp: bool, dry_run: bool, token_scope: str, **options):
        if url is None:
            url, source = tool_configs.server_url()
            self.stdout.write(
                f"Bridge's address for the skill: {printable(url)} ({printable(source)}; --url sets another)"
            )
        if not url.startswith(("http://", "https://")):
            raise CommandError(f"--url must start with http:// or https://, not '{printable(url)}'")
        url = url.rstrip("/")
        home = Path(options.get("home", Path.home()))
        environ = options.get("environ", os.environ)
        hermes = hermes_home(home, environ)
        category = hermes / "skills" / SKILL_CATEGORY

        skill_path = category / SKILL_NAME / "SKILL.md"
        skill = tool_configs.FileChange(
            skill_path,
            tool_configs.read_text_if_exists(skill_path),
            render_skill(url, token_scope),
            backup_dir=skill_backup_dir(),
            backup_name=f"{SKILL_NAME}.SKILL.md",
        )
        changes = [skill]
        description_path = category / "DESCRIPTION.md"
        if not description_path.exists():
            changes.append(tool_configs.FileChange(description_path, None, CATEGORY_DESCRIPTION))
        entry = None
        if mcp:
            entry = tool_configs.mcp_server_entry(environ)
            config_path = hermes / "config.yaml"
            current = tool_configs.read_text_if_exists(config_path)
            try:
                new = tool_configs.merged_hermes_config(config_path, current, entry)
            except tool_configs.ConfigError as exc:
                raise CommandError(f"nothing was written: {printable(exc)}. Fix the file and run this again.") from None
            changes.append(tool_configs.FileChange(config_path, current, new))
            if new != current and tool_configs.has_yaml_comments(current):
                self.stderr.write(f"note: the comments in {printable(config_path)} are not kept (the backup has them)")

        for change in changes:
            self.stdout.write(tool_configs.show_or_apply(change, dry_run))
        if entry:
            for warning in tool_configs.credential_warnings(entry):
                self.stderr.write(f"note: {printable(warning)}")
            for warning in tool_configs.executor_warnings(environ, entry):
                self.stderr.write(f"warning: {printable(warning)}")
        if not dry_run:
            self.stdout.write(
                f"Make Hermes' token with: {hermes_token_command(token_scope)}\n"
                "Give Hermes the token without writing it into the skill: export BRIDGE_TOKEN=brg_... before starting "
                f"it, or put BRIDGE_TOKEN=brg_... in {printable(hermes / '.env')}. Start a new Hermes session to load "
                "the skill."
            )
