# A merge or discard asked of a worktree on another host, kept on its row until a supervisor on that host carries it
# out, and the last one refused (docs/architecture.md, "Changes and worktrees"). The partial index holds only rows
# with a request pending, so each supervisor's sweep looks for its machine's in one cheap read. Only the worktree
# table is rebuilt on SQLite (the task table, whose triggers keep jobs_taskcount, is not touched).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0014_task_changes_worktrees"),
    ]

    operations = [
        migrations.AddField(
            model_name="worktree",
            name="request",
            field=models.CharField(blank=True, max_length=10),
        ),
        migrations.AddField(
            model_name="worktree",
            name="request_message",
            field=models.TextField(blank=True),
        ),
        migrations.AddField(
            model_name="worktree",
            name="requested_by",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="worktree",
            name="requested_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="worktree",
            name="request_taken_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="worktree",
            name="refusal",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddIndex(
            model_name="worktree",
            index=models.Index(
                condition=models.Q(("request", ""), _negated=True), fields=["machine"], name="worktree_requested"
            ),
        ),
    ]
