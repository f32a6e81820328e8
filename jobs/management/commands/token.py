"""`manage.py token create NAME | list | revoke NAME`: API tokens for programs."""

from django.core.management.base import BaseCommand, CommandError

from jobs.actions import create_token, revoke_tokens
from jobs.core.errors import BridgeError
from jobs.core.hints import manage_command
from jobs.models import ApiToken


class Command(BaseCommand):
    help = "Create, list or revoke API tokens. A new token is printed once, alone on the last line."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="make a token and print it (it is not shown again)")
        create.add_argument("name")
        sub.add_parser("list", help="list tokens (never their secret)")
        sub.add_parser("ensure", help="first run: make a token named 'default' if there is no active token")
        revoke = sub.add_parser("revoke", help="stop a token from working")
        revoke.add_argument("name")

    def handle(self, *args, action, **options):
        if action == "create":
            try:
                row, token = create_token(options["name"])
            except BridgeError as exc:  # an active token has the name, or the name is empty or unusable
                raise CommandError(exc.message) from None
            self.stderr.write(f"Token {row.name!r} created. It is shown once; keep it somewhere safe:")
            self.stdout.write(token)
        elif action == "ensure":
            active = ApiToken.objects.filter(revoked_at__isnull=True)
            if active.exists():
                names = ", ".join(active.values_list("name", flat=True))
                self.stderr.write(
                    f"API tokens exist ({names}); each was shown once when made. "
                    f"A new one: {manage_command('token', 'create', 'NAME')}"
                )
                return
            _, token = create_token("default")
            self.stderr.write("First run: made the API token 'default'. It is shown once; keep it somewhere safe:")
            self.stdout.write(token)
        elif action == "list":
            for row in ApiToken.objects.order_by("created_at"):
                state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
                used = f"last used {row.last_used_at:%Y-%m-%d %H:%M}" if row.last_used_at else "never used"
                self.stdout.write(f"{row.name}\t{row.prefix}…\t{state}\t{used}")
        else:
            if not revoke_tokens(ApiToken.objects.filter(name=options["name"])):
                raise CommandError(
                    f"no active token named {options['name']!r}; see the tokens with: {manage_command('token', 'list')}"
                )
            self.stdout.write(f"revoked {options['name']}")
