"""`manage.py rules list [--all] | add RULE DECISION [--root PATH] [--agent A] [--message M] | remove ID |
preset NAME [--root PATH] [--off]`: the user's permission rules from a terminal (jobs/actions/rules.py).

What a row holds is printed through `jobs.core.terminal.printable`: shown, never obeyed."""

from django.core.management.base import BaseCommand, CommandError

from jobs import actions
from jobs.core.errors import BridgeError
from jobs.core.terminal import printable
from jobs.core.vocabulary import RuleDecision
from jobs.management.startup import check_database
from jobs.models import PermissionRule

BY = "manage.py rules"


def rule_line(rule: PermissionRule) -> str:
    """One rule on one line: id, decision, pattern, where it applies, and what else it holds."""
    where = f"root {rule.root}" if rule.root else "everywhere"
    extras = [f"agent {rule.agent}" if rule.agent else "", f"preset {rule.preset}" if rule.preset else ""]
    extras += [f"task {rule.task.public_id}" if rule.task is not None else "", "removed" if rule.removed_at else ""]
    extras += [f"expires {rule.expires_at:%Y-%m-%d %H:%M}" if rule.expires_at else ""]
    described = "\t".join([str(rule.pk), rule.decision, rule.pattern, where, *filter(None, extras)])
    return printable(described) + (f"\tmessage: {printable(rule.message)}" if rule.message else "")


class Command(BaseCommand):
    help = "List, add or remove permission rules, or switch a preset of rules on or off for a root."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        listed = sub.add_parser("list", help="the rules that decide now, oldest first")
        listed.add_argument("--all", action="store_true", help="removed and expired rules too")
        add = sub.add_parser("add", help="add a rule, e.g. add 'Bash(npm test:*)' allow --root ~/code/app")
        add.add_argument("rule", help="Claude Code's syntax: Bash(git status), Read(src/**), WebFetch(domain:x.org)")
        add.add_argument("decision", choices=[decision.value for decision in RuleDecision])
        add.add_argument("--root", default="", help="only tasks whose cwd is PATH or under it (default: everywhere)")
        add.add_argument("--agent", default="", help="only this agent's tasks (default: any)")
        add.add_argument("--message", default="", help="deny only: what the agent is told")
        remove = sub.add_parser("remove", help="stop a rule from deciding (it stays on record)")
        remove.add_argument("id", type=int)
        preset = sub.add_parser("preset", help="switch a preset on for a root, e.g. preset read-only --root ~/code/app")
        preset.add_argument("name", choices=list(actions.PRESETS))
        preset.add_argument("--root", default="", help="tasks under PATH (default: everywhere)")
        preset.add_argument("--off", action="store_true", help="switch it off for the root: its rules are removed")

    def handle(self, *args, action, **options):
        check_database()
        try:
            if action == "list":
                for rule in actions.list_rules(include_ended=options["all"]):
                    self.stdout.write(rule_line(rule))
            elif action == "add":
                made = actions.add_rule(
                    options["rule"],
                    options["decision"],
                    message=options["message"],
                    root=options["root"],
                    agent=options["agent"],
                    by=BY,
                )
                self.stdout.write(rule_line(made))
            elif action == "remove":
                self.stdout.write(rule_line(actions.remove_rule(options["id"], by=BY)))
            else:
                self.switch(options["name"], options["root"], not options["off"])
        except BridgeError as exc:  # a rule that does not parse, a root outside the allowed ones, no such rule
            raise CommandError(exc.message) from None

    def switch(self, name: str, root: str, on: bool) -> None:
        changed = actions.switch_preset(name, root, on=on, by=BY)
        where = f"root {printable(root)}" if root else "everywhere"
        state = "on" if on else "off"
        self.stderr.write(f"Preset {name} is {state} for {where}: {len(changed)} rule(s) {'made' if on else 'removed'}")
        for rule in changed:
            self.stdout.write(rule_line(rule))
