"""Permission rules (jobs/actions/rules.py): the rules, the one row whose stamp says they changed, and on each
permission request the rule that matched it."""

import uuid

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0015_worktree_requests"),
    ]

    operations = [
        migrations.CreateModel(
            name="PermissionRule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("pattern", models.TextField()),
                (
                    "decision",
                    models.CharField(choices=[("allow", "Allow"), ("ask", "Ask"), ("deny", "Deny")], max_length=10),
                ),
                ("message", models.TextField(blank=True)),
                ("root", models.TextField(blank=True)),
                (
                    "agent",
                    models.CharField(
                        blank=True, choices=[("claude", "Claude Code"), ("hermes", "Hermes Agent")], max_length=20
                    ),
                ),
                ("created_for", models.CharField(blank=True, max_length=200)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                ("created_by", models.CharField(blank=True, max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("removed_at", models.DateTimeField(blank=True, null=True)),
                ("removed_by", models.CharField(blank=True, max_length=200)),
            ],
            options={"ordering": ["id"]},
        ),
        migrations.CreateModel(
            name="PermissionRulesVersion",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("stamp", models.UUIDField(default=uuid.uuid4)),
            ],
        ),
        migrations.AddField(
            model_name="permissionrequest",
            name="rule",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="permission_requests",
                to="jobs.permissionrule",
            ),
        ),
    ]
