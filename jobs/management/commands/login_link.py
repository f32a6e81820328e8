"""`manage.py login_link [--user NAME]`: a new one-time browser login link, without restarting Bridge."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from jobs.core.hints import manage_command
from jobs.core.terminal import printable
from jobs.integrations import tool_configs
from jobs.web.auth import login_link_path, login_user


class Command(BaseCommand):
    help = "Print a one-time login link (valid 1 hour) for the first superuser, or --user NAME."

    def add_arguments(self, parser):
        parser.add_argument("--user", help="whom the link logs in (default: the first superuser)")

    def handle(self, *args, user: str | None, **options) -> None:
        if user:
            account = get_user_model().objects.filter(username=user, is_active=True).first()
            if account is None:
                raise CommandError(
                    f"no active user named '{printable(user)}': leave out --user for the first superuser, or make one "
                    f"with {manage_command('createsuperuser')}"
                )
        else:
            account, _ = login_user()
        url, source = tool_configs.server_url()
        self.stdout.write(f"Open this one-time login link (valid 1 hour): {printable(url)}{login_link_path(account)}")
        self.stderr.write(f"({printable(url)}: {printable(source)})")
