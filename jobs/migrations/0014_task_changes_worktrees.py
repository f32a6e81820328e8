# What a task changed (TaskChanges) and the git worktree an isolated task runs in (Worktree): docs/architecture.md,
# "Changes and worktrees". The task's link to its worktree is a nullable column with no constraint and no default,
# indexed by a partial index, so SQLite adds and drops it in place instead of rebuilding the task table, which would
# drop the triggers that keep jobs_taskcount (0006).


import django.db.models.deletion
from django.db import migrations, models

import jobs.core.vocabulary


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0013_task_line"),
    ]

    operations = [
        migrations.CreateModel(
            name="TaskChanges",
            fields=[
                (
                    "task",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="changes",
                        serialize=False,
                        to="jobs.task",
                    ),
                ),
                ("machine", models.CharField(max_length=64)),
                ("snapshot", models.JSONField(default=dict)),
                (
                    "state",
                    models.CharField(
                        choices=[("pending", "Pending"), ("recorded", "Recorded"), ("unavailable", "Unavailable")],
                        default=jobs.core.vocabulary.ChangesState["PENDING"],
                        max_length=12,
                    ),
                ),
                ("kind", models.CharField(blank=True, max_length=10)),
                ("base", models.CharField(blank=True, max_length=64)),
                ("files", models.JSONField(default=list)),
                ("patch", models.TextField(blank=True)),
                ("truncated", models.BooleanField(default=False)),
                ("left_out", models.TextField(blank=True)),
                ("reason", models.TextField(blank=True)),
                ("files_changed", models.IntegerField(default=0)),
                ("lines_added", models.IntegerField(default=0)),
                ("lines_removed", models.IntegerField(default=0)),
                ("started_at", models.DateTimeField(auto_now_add=True)),
                ("recorded_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="Worktree",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("base_ref", models.CharField(blank=True, max_length=200)),
                ("repo", models.TextField(blank=True)),
                ("path", models.TextField(blank=True)),
                ("branch", models.CharField(blank=True, max_length=200)),
                ("base_branch", models.CharField(blank=True, max_length=200)),
                ("base_commit", models.CharField(blank=True, max_length=64)),
                ("relative_cwd", models.TextField(blank=True)),
                ("machine", models.CharField(blank=True, max_length=64)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("planned", "Planned"),
                            ("live", "Live"),
                            ("merged", "Merged"),
                            ("discarded", "Discarded"),
                            ("pruned", "Pruned"),
                        ],
                        default=jobs.core.vocabulary.WorktreeState["PLANNED"],
                        max_length=10,
                    ),
                ),
                ("merged_commit", models.CharField(blank=True, max_length=64)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("removed_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.AddField(
            model_name="task",
            name="worktree",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="tasks",
                to="jobs.worktree",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("worktree__isnull", False)), fields=["worktree"], name="task_isolated"
            ),
        ),
    ]
