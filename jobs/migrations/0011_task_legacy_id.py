# Imported history (`manage.py import_legacy`, jobs/actions/imports.py): the id a task had in the older tool it came
# from, one task per id, and the source `imported`. The column is nullable with no default, and the constraint has a
# condition, so SQLite adds both in place (ALTER TABLE ADD COLUMN, CREATE UNIQUE INDEX … WHERE) instead of rebuilding
# the task table, which would drop the triggers that keep jobs_taskcount (0006). The source's new choice changes
# nothing in the database.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0010_worker_readiness"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="legacy_id",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AlterField(
            model_name="task",
            name="source",
            field=models.CharField(
                choices=[("api", "Api"), ("mcp", "Mcp"), ("web", "Web"), ("imported", "Imported")],
                default="api",
                max_length=10,
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.UniqueConstraint(
                condition=models.Q(("legacy_id__isnull", False)), fields=("legacy_id",), name="unique_legacy_id"
            ),
        ),
    ]
