# Claude Code's own permission modes, `acceptEdits` and `plan`, as a task's permission_mode (jobs/core/vocabulary.py).
# Only the field's choices change: nothing in the database (no SQL on any backend, so SQLite does not rebuild the task
# table, which would drop the triggers that keep jobs_taskcount: 0006).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0011_task_legacy_id"),
    ]

    operations = [
        migrations.AlterField(
            model_name="task",
            name="permission_mode",
            field=models.CharField(
                choices=[
                    ("approve", "ask for every tool"),
                    ("bypass", "allow every tool (recorded as policy)"),
                    ("skip", "the CLI's own skip-permissions flag"),
                    ("acceptEdits", "Claude accepts file edits; ask for the rest"),
                    ("plan", "Claude plans; ask for anything it would change"),
                ],
                default="approve",
                max_length=20,
            ),
        ),
    ]
