"""Browser forms. They only shape input; jobs.actions decides what is allowed (confinement, limits, modes)."""

import json

from django import forms

from jobs.agents import registry
from jobs.core.vocabulary import Agent, Isolation, PermissionMode, Remember, RuleDecision, choices


def any_agent_choices() -> list[tuple[str, str]]:
    """Every executor, or none in particular (a rule for any agent)."""
    return [("", "Any agent"), *registry.choices()]


class NewTaskForm(forms.Form):
    agent = forms.ChoiceField(choices=registry.choices, initial=Agent.CLAUDE)
    prompt = forms.CharField(widget=forms.Textarea(attrs={"rows": 8, "placeholder": "What should the agent do?"}))
    cwd = forms.CharField(
        label="Working directory",
        required=False,
        help_text="An absolute path inside the allowed roots; empty for the default directory.",
    )
    permission_mode = forms.ChoiceField(
        choices=[
            (PermissionMode.APPROVE, "Ask me for every tool"),
            (PermissionMode.BYPASS, "Allow every tool"),
            (PermissionMode.ACCEPT_EDITS, "Claude Code: accept file edits, ask me for the rest"),
            (PermissionMode.PLAN, "Claude Code: plan only, ask me before any change"),
        ],
        initial=PermissionMode.APPROVE,
    )
    isolation = forms.ChoiceField(
        label="Where the agent works",
        choices=[
            ("", "The default for this directory"),
            (Isolation.NONE, "In the working directory itself"),
            (Isolation.WORKTREE, "In a git worktree of its own, to merge or discard afterwards"),
        ],
        required=False,
        help_text="A worktree needs a working directory inside a git repository.",
    )
    base = forms.CharField(
        label="Worktree starts from",
        required=False,
        help_text="A branch, tag or commit; empty for the repository's current HEAD.",
    )
    model = forms.CharField(required=False, help_text="Empty for the agent's default model.")
    max_turns = forms.IntegerField(required=False, min_value=1, max_value=10_000)
    timeout_s = forms.IntegerField(label="Timeout (seconds)", required=False, min_value=1)
    permission_timeout_s = forms.IntegerField(
        label="Wait for a decision (seconds)",
        required=False,
        min_value=1,
        help_text="How long each permission request waits before it is denied; empty for the server's "
        "BRIDGE_PERMISSION_TIMEOUT_S.",
    )
    disallowed_tools = forms.CharField(
        label="Tools to deny (Claude Code)",
        required=False,
        help_text='Comma-separated, e.g. "Bash(git push:*), WebFetch".',
    )
    append_system_prompt = forms.CharField(
        label="Add to the system prompt (Claude Code)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    add_dirs = forms.CharField(
        label="More directories (Claude Code)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Absolute paths inside the allowed roots, one a line.",
    )

    def options(self) -> dict:
        """The options as every interface gives them (jobs.actions checks them): lists from the comma-separated or
        line-separated text, and only what was filled in."""
        data = self.cleaned_data
        given = {k: data[k] for k in ("model", "max_turns", "append_system_prompt") if data.get(k)}
        lists = {
            "disallowed_tools": [name.strip() for name in data.get("disallowed_tools", "").split(",")],
            "add_dirs": [line.strip() for line in data.get("add_dirs", "").splitlines()],
        }
        return given | {key: [entry for entry in entries if entry] for key, entries in lists.items() if any(entries)}


class FollowUpForm(forms.Form):
    prompt = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "placeholder": "What should the agent do next?"}))


class MergeForm(forms.Form):
    strategy = forms.ChoiceField(choices=[("merge", "Merge"), ("squash", "Squash")])


# How far a decision on a permission card is remembered as a rule (jobs/actions/rules.py, `remember`).
REMEMBER_CHOICES = [
    ("", "Just this once"),
    (Remember.TASK, "For this task"),
    (Remember.SESSION, "For this session"),
    (Remember.PROJECT, "For this project"),
    (Remember.ALWAYS, "Always"),
]


class DecisionForm(forms.Form):
    behavior = forms.ChoiceField(choices=[("allow", "Allow"), ("deny", "Deny")])
    message = forms.CharField(required=False)
    updated_input = forms.CharField(required=False)
    remember = forms.ChoiceField(choices=REMEMBER_CHOICES, required=False)
    rule = forms.CharField(required=False)

    def clean_remember(self) -> str | None:
        return self.cleaned_data["remember"] or None

    def clean_rule(self) -> str | None:
        return self.cleaned_data["rule"] or None

    def clean_updated_input(self) -> dict | None:
        raw = self.cleaned_data["updated_input"].strip()
        if not raw:
            return None
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise forms.ValidationError(f"the edited input is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("the edited input must be a JSON object, like the original")
        return value


class RuleForm(forms.Form):
    """A permission rule as a person types it; jobs.actions.add_rule checks the pattern, the root and the rest."""

    rule = forms.CharField(
        widget=forms.TextInput(attrs={"placeholder": "Bash(npm run test:*)", "spellcheck": "false"}),
        help_text="Claude Code's rule syntax: Bash(git status), Bash(npm run test:*), Read(src/**), Edit(docs/*.md), "
        "WebFetch(domain:example.com), mcp__server__tool.",
    )
    decision = forms.ChoiceField(
        choices=choices(RuleDecision),
        initial=RuleDecision.ALLOW,
        help_text="Deny beats ask beats allow; ask always leaves the request to a person.",
    )
    message = forms.CharField(
        label="Message (deny only)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What the agent is told when this rule denies.",
    )
    root = forms.CharField(
        label="Directory",
        required=False,
        widget=forms.TextInput(attrs={"list": "allowed-roots", "spellcheck": "false"}),
        help_text="Only tasks in this directory or under it; empty for everywhere.",
    )
    agent = forms.ChoiceField(choices=any_agent_choices, required=False)
    expires_at = forms.DateTimeField(
        label="Expires (UTC)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text="Empty: it never expires.",
    )


class PresetForm(forms.Form):
    """A preset switched on or off for a root; jobs.actions.switch_preset checks the name and the root."""

    preset = forms.CharField()
    root = forms.CharField(required=False)
    on = forms.TypedChoiceField(choices=[("1", "on"), ("0", "off")], coerce=lambda value: value == "1")
