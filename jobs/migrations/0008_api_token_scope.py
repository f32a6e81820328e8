# Scopes and roots for API tokens (jobs/core/access.py). Every existing token gets `decide` and no roots: it keeps
# doing everything it did before.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0007_task_session_order_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="scope",
            field=models.CharField(
                choices=[("read", "Read"), ("run", "Run"), ("decide", "Decide")], default="decide", max_length=10
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="roots",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
