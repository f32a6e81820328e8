"""The claim query against the one rule of "inside a root" (integration: the test database): `servable_by`, the
query a supervisor claims with, selects every queued task `serves` accepts, for generated roots in POSIX or Windows
form and cwds named in any case. The rule itself is unit-tested in tests/unit/test_paths.py."""

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.support import COMPONENTS, posix, recased

AGENTS = ("claude", "hermes")


@pytest.mark.django_db
def test_the_claim_query_never_leaves_out_a_task_the_supervisor_serves():
    """`servable_by` (the claim's query, on this run's database) selects every queued task `serves` accepts, for
    roots in either form, cwds named in any case and any readiness of each agent the supervisor recorded: it is a
    prefilter of the one rule, never narrower."""
    from django.db import transaction

    from jobs.actions.workers import servable_by, serves
    from jobs.models import Task, Worker

    @given(
        st.lists(COMPONENTS, min_size=1, max_size=3),
        st.lists(
            st.tuples(st.integers(0, 2), COMPONENTS, st.lists(st.booleans(), max_size=40), st.sampled_from(AGENTS)),
            max_size=6,
        ),
        st.booleans(),
        st.dictionaries(st.sampled_from(AGENTS), st.sampled_from(["yes", "no", "unknown"])),
    )
    @hypothesis_settings(max_examples=60, deadline=None)
    def check(roots, tasks, windows, readiness):
        text = [windows_root(components) if windows else posix(components) for components in roots]
        recorded = {agent: {"agent": agent, "ready": ready} for agent, ready in readiness.items()}
        worker = Worker(name="w", host="h", roots=text, labels=[], executors=recorded)
        with transaction.atomic():
            for which, below, flips, agent in tasks:
                root = text[which % len(text)]
                cwd = root + ("\\" if windows else "/") + ("\\" if windows else "/").join(below)
                Task.objects.create(prompt="p", cwd=recased(cwd, flips), agent=agent)
            served = {t.pk for t in Task.objects.all() if serves(worker, t.cwd, "", t.agent)}
            selected = set(Task.objects.filter(servable_by(worker)).values_list("pk", flat=True))
            assert served <= selected
            transaction.set_rollback(True)

    check()


def windows_root(components: list[str]) -> str:
    return "C:\\" + "\\".join(components)
