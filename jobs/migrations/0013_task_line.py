# A task's raw transcript: the lines its agent wrote on stdout (jobs/actions/transcripts.py), deleted with the task.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0012_task_permission_mode_claude"),
    ]

    operations = [
        migrations.CreateModel(
            name="TaskLine",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("n", models.IntegerField()),
                ("last", models.IntegerField()),
                ("data", models.BinaryField(default=b"")),
                ("size", models.BigIntegerField(default=0)),
                ("omitted", models.IntegerField(default=0)),
                ("note", models.TextField(blank=True, default="")),
                (
                    "task",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="lines",
                        to="jobs.task",
                    ),
                ),
            ],
            options={
                "ordering": ["task", "last"],
                "constraints": [models.UniqueConstraint(fields=("task", "last"), name="unique_task_line")],
            },
        ),
    ]
