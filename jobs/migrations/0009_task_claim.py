# Fencing (docs/architecture.md, "Fencing"): the claim a running task runs under, moved on by every claim, so a run's
# writes land only while the task is still running under its own; NULL once the task's terminal status event is
# written. A constant database default (a Value, not a model default: Django rebuilds the table for any other) lets
# SQLite add the column in place, keeping the triggers that keep jobs_taskcount (0006), which a rebuild drops. Tasks
# that have ended already are closed.

from django.db import migrations, models

TERMINAL = ("done", "failed", "cancelled", "timeout", "orphaned")


def close_ended_tasks(apps, schema_editor):
    Task = apps.get_model("jobs", "Task")
    Task.objects.filter(status__in=TERMINAL).update(claim=None)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0008_api_token_scope"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="claim",
            field=models.IntegerField(db_default=models.Value(0), null=True),
        ),
        migrations.RunPython(close_ended_tasks, migrations.RunPython.noop),
    ]
