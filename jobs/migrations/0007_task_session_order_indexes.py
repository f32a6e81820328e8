# The indexes a resume's wait for the earlier tasks of its agent session is looked up by (jobs/actions/runs.py,
# `session_is_free`): one run at a time per agent session.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0006_task_count"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="task",
            index=models.Index(fields=["agent", "resume_session_id", "status"], name="task_active_resuming"),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(fields=["session", "status"], name="task_active_in_session"),
        ),
    ]
