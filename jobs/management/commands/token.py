"""`manage.py token create NAME [--scope S] [--root PATH]… | list | ensure | revoke NAME`: API tokens for programs.

Names and roots are printed through `jobs.core.terminal.printable`: whatever a row holds is shown, never obeyed."""

from django.core.management.base import BaseCommand, CommandError

from jobs.actions import create_token, revoke_tokens
from jobs.actions.tokens import MAX_ROOTS
from jobs.core.access import DEFAULT_SCOPE, Scope
from jobs.core.errors import BridgeError
from jobs.core.hints import manage_command
from jobs.core.terminal import printable
from jobs.management.startup import check_database
from jobs.models import ApiToken


def describe_access(row: ApiToken) -> str:
    """A token's scope, and the roots it is limited to (or that it is not)."""
    roots = "roots " + ", ".join(printable(root) for root in row.roots) if row.roots else "any root"
    return f"scope {printable(row.scope)}, {roots}"


class Command(BaseCommand):
    help = "Create, list or revoke API tokens. A new token is printed once, alone on the last line."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="make a token and print it (it is not shown again)")
        create.add_argument("name", help="letters, digits, punctuation, symbols and spaces (no control characters)")
        create.add_argument(
            "--scope",
            choices=[scope.value for scope in Scope],
            default=DEFAULT_SCOPE.value,
            help="; ".join(f"{scope}: {scope.meaning}" for scope in Scope) + f" (default {DEFAULT_SCOPE})",
        )
        create.add_argument(
            "--root",
            action="append",
            dest="roots",
            default=[],
            help=f"see and create only tasks whose cwd lies under PATH; repeatable, at most {MAX_ROOTS} "
            "(default: any allowed root)",
        )
        sub.add_parser("list", help="list tokens with their scope and roots (never their secret)")
        sub.add_parser("ensure", help="first run: make a token named 'default' if there is no active token")
        revoke = sub.add_parser("revoke", help="stop a token from working")
        revoke.add_argument("name")

    def handle(self, *args, action, **options):
        check_database()
        if action == "create":
            self.create(options["name"], options["scope"], options["roots"])
        elif action == "ensure":
            self.ensure()
        elif action == "list":
            for row in ApiToken.objects.order_by("created_at"):
                state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
                used = f"last used {row.last_used_at:%Y-%m-%d %H:%M}" if row.last_used_at else "never used"
                self.stdout.write(f"{printable(row.name)}\t{row.prefix}…\t{describe_access(row)}\t{state}\t{used}")
        else:
            self.revoke(options["name"])

    def create(self, name: str, scope: str, roots: list[str]) -> None:
        try:
            row, token = create_token(name, scope, roots)
        except BridgeError as exc:  # an active token has the name, or the name, scope or a root is unusable
            raise CommandError(exc.message) from None
        self.stderr.write(
            f"Token '{printable(row.name)}' created ({describe_access(row)}). It is shown once; keep it somewhere safe:"
        )
        self.stdout.write(token)

    def ensure(self) -> None:
        active = ApiToken.objects.filter(revoked_at__isnull=True)
        if active.exists():
            names = ", ".join(printable(name) for name in active.values_list("name", flat=True))
            self.stderr.write(
                f"API tokens exist ({names}); each was shown once when made. "
                f"A new one: {manage_command('token', 'create', 'NAME')}"
            )
            return
        _, token = create_token("default")
        self.stderr.write("First run: made the API token 'default'. It is shown once; keep it somewhere safe:")
        self.stdout.write(token)

    def revoke(self, name: str) -> None:
        if not revoke_tokens(ApiToken.objects.filter(name=name)):
            raise CommandError(
                f"no active token named '{printable(name)}'; see the tokens with: {manage_command('token', 'list')}"
            )
        self.stdout.write(f"revoked {printable(name)}")
