"""jobs.actions.rows reads back exactly what the ORM reads, whatever a row holds, and filters and sorts as the ORM does.

Rows are generated from each model's own fields (every type Bridge stores: text of any script, JSON, dates with
microseconds, floats, 64-bit counts, UUIDs, nulls). Also rerun on PostgreSQL by tests/integration/test_postgres.py.
"""

from datetime import UTC, datetime
from functools import cache

import pytest
from django.db import connection, models
from django.test.utils import CaptureQueriesContext
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.actions import rows
from jobs.models import AgentSession, ApiToken, PermissionRequest, Task, Worker

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")  # PostgreSQL's text holds no NUL
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(TEXT, max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(TEXT, max_size=8), inner, max_size=4),
    max_leaves=10,
)
MODELS = (Task, PermissionRequest, ApiToken, Worker, AgentSession)


def values_of(field: models.Field) -> st.SearchStrategy:
    """Any value the field's column can hold."""
    if isinstance(field, models.JSONField):
        strategy = JSON.filter(lambda value: value is not None)  # the ORM stores a None as SQL NULL
    elif isinstance(field, models.DateTimeField):
        strategy = st.datetimes(datetime(1970, 1, 2), datetime(2200, 1, 1), timezones=st.just(UTC))
    elif isinstance(field, models.FloatField):
        strategy = st.floats(allow_nan=False, allow_infinity=False)
    elif isinstance(field, models.BigIntegerField):
        strategy = st.integers(-(2**63), 2**63 - 1)
    elif isinstance(field, models.IntegerField):
        strategy = st.integers(-(2**31), 2**31 - 1)
    elif isinstance(field, models.BooleanField):
        strategy = st.booleans()
    elif isinstance(field, models.UUIDField):
        strategy = st.uuids()
    elif isinstance(field, models.CharField | models.TextField):
        strategy = st.text(TEXT, max_size=field.max_length or 60)
    else:
        raise AssertionError(f"no values for {field!r}: teach this test the new field type")
    return st.none() | strategy if field.null else strategy


@cache
def row_of(model: type[models.Model]) -> st.SearchStrategy[dict]:
    """Values for every column a model's row stores itself (foreign keys are set by the test). Built once per model:
    built anew for each example, the strategies and their validation cost about a sixth of the tests' time."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key and not f.is_relation]
    return st.fixed_dictionaries({field.attname: values_of(field) for field in fields})


def store(model: type[models.Model], values: dict, **links) -> models.Model:
    """A row with exactly these values: saved, then its auto_now_add dates overwritten."""
    row = model.objects.create(**values, **links)
    model.objects.filter(pk=row.pk).update(**values)
    return row


def columns(row: models.Model) -> dict:
    return {field.attname: getattr(row, field.attname) for field in type(row)._meta.concrete_fields}


def same(found: models.Model, expected: models.Model) -> None:
    assert type(found) is type(expected)
    assert columns(found) == columns(expected)
    assert {k: type(v) for k, v in columns(found).items()} == {k: type(v) for k, v in columns(expected).items()}
    assert found._state.adding is False and found._state.db == "default"


@hypothesis_settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_row_reads_back_as_the_orm_reads_it(data):
    try:
        worker = store(Worker, data.draw(row_of(Worker)))
        session = store(AgentSession, data.draw(row_of(AgentSession)))
        task = store(Task, data.draw(row_of(Task)), worker=worker, session=session)
        perm = store(PermissionRequest, data.draw(row_of(PermissionRequest)), task=task)
        token = store(ApiToken, data.draw(row_of(ApiToken)))
        for model, row in ((Worker, worker), (AgentSession, session), (Task, task), (PermissionRequest, perm)):
            [found] = rows.select(model, id=row.pk)
            same(found, model.objects.get(pk=row.pk))
        [found] = rows.select(Task, public_id=Task.objects.get(pk=task.pk).public_id)
        same(found, Task.objects.get(pk=task.pk))
        [found] = rows.select(Task, public_id=found.public_id, related=("session", "worker"))
        joined = Task.objects.select_related("session", "worker").get(pk=task.pk)
        same(found, joined)
        same(found.session, joined.session)
        same(found.worker, joined.worker)
        with CaptureQueriesContext(connection) as queries:
            assert (found.session.pk, found.worker.pk) == (session.pk, worker.pk)
        assert not queries.captured_queries, "the related rows came with the task"
        [found] = rows.select(Task, id=Task.objects.create(prompt="p", cwd="/").pk, related=("session", "worker"))
        assert found.session is None and found.worker is None
        [found] = rows.select(ApiToken, prefix=ApiToken.objects.get(pk=token.pk).prefix, id=token.pk)
        same(found, ApiToken.objects.get(pk=token.pk))
    finally:
        for model in MODELS:
            model.objects.all().delete()


@hypothesis_settings(max_examples=40, deadline=None)
@given(
    requests=st.lists(
        st.tuples(
            st.sampled_from(["pending", "allowed", "denied"]),
            st.datetimes(datetime(2020, 1, 1), datetime(2020, 1, 2), timezones=st.just(UTC)),
            st.booleans(),  # of the other task
            st.none() | st.datetimes(datetime(2020, 1, 1), datetime(2020, 1, 2), timezones=st.just(UTC)),
        ),
        min_size=3,
        max_size=12,
    ),
    status=st.sampled_from(["pending", "allowed"]),
    newest_first=st.booleans(),
    limit=st.none() | st.integers(0, 5),
)
def test_filters_order_and_limit_are_the_orms(requests, status, newest_first, limit):
    mine, other = Task.objects.create(prompt="a", cwd="/"), Task.objects.create(prompt="b", cwd="/")
    try:
        for n, (state, created_at, of_other, delivered_at) in enumerate(requests):
            store(
                PermissionRequest,
                {"request_id": f"r{n}", "tool_name": "Bash", "status": state, "created_at": created_at},
                task=other if of_other else mine,
                delivered_at=delivered_at,
            )
        order = ("-created_at", "-id") if newest_first else ("created_at", "id")
        found = rows.select(PermissionRequest, task_id=mine.pk, status=status, order_by=order, limit=limit)
        expected = PermissionRequest.objects.filter(task=mine, status=status).order_by(*order)
        assert [r.pk for r in found] == [r.pk for r in (expected[:limit] if limit is not None else expected)]
        # joined, the tables share column names (id, created_at, status): each is read from its own table
        joined = rows.select(
            PermissionRequest, task_id=mine.pk, status=status, order_by=order, limit=limit, related=("task",)
        )
        assert [(r.pk, r.task.pk, r.task.prompt) for r in joined] == [(r.pk, mine.pk, "a") for r in found]
        cut = sorted(r.created_at for r in PermissionRequest.objects.all())[len(requests) // 2]
        found = rows.select(PermissionRequest, task_id=mine.pk, above={"created_at": cut}, order_by=order, limit=limit)
        expected = PermissionRequest.objects.filter(task=mine, created_at__gt=cut).order_by(*order)
        assert [r.pk for r in found] == [r.pk for r in (expected[:limit] if limit is not None else expected)]
        undelivered = rows.select(PermissionRequest, task_id=mine.pk, delivered_at=None, order_by=("id",))
        assert [r.pk for r in undelivered] == [
            r.pk for r in PermissionRequest.objects.filter(task=mine, delivered_at__isnull=True).order_by("id")
        ]
    finally:
        Task.objects.all().delete()


def test_a_name_that_is_no_column_is_refused():
    with pytest.raises(ValueError, match="Task has no column 'nonsense'"):
        rows.select(Task, nonsense=1)
    with pytest.raises(ValueError, match="Task has no column 'events'"):
        rows.select(Task, order_by=("events",))


@hypothesis_settings(max_examples=20, deadline=None)
@given(st.data())
def test_refresh_reads_every_column_again_as_refresh_from_db_does(data):
    try:
        first = store(Worker, {**data.draw(row_of(Worker)), "name": "first"})
        second = store(Worker, {**data.draw(row_of(Worker)), "name": "second"})
        task = store(Task, data.draw(row_of(Task)), worker=first)
        held = Task.objects.get(pk=task.pk)
        assert held.worker == first  # the related object is cached on `held` now
        other_pid = first.pid - 1 if first.pid == 2**31 - 1 else first.pid + 1  # within the column's range
        Worker.objects.filter(pk=first.pk).update(pid=other_pid)
        rows.refresh(held)
        assert held.worker.pid == other_pid, "the related objects it held are read again when next used"
        Task.objects.filter(pk=task.pk).update(**data.draw(row_of(Task)), worker=second)
        rows.refresh(held)
        same(held, Task.objects.get(pk=task.pk))
        assert held.worker == second
        Task.objects.filter(pk=task.pk).delete()
        with pytest.raises(Task.DoesNotExist):
            rows.refresh(held)
    finally:
        for model in MODELS:
            model.objects.all().delete()


def test_compiled_runs_the_sql_the_orm_built_first_for_its_key(tmp_path):
    """A query is built once per key and read with that SQL after, so rows added later are seen; another key builds
    its own."""
    made = [Task.objects.create(prompt=f"p{n}", cwd=str(tmp_path), agent="claude") for n in range(3)]
    builds: list[str] = []

    def build(prompt: str):
        builds.append(prompt)
        return Task.objects.filter(prompt=prompt).values_list("pk", "prompt")

    key = ("test", "p0")
    assert rows.compiled(key, lambda: build("p0")) == [(made[0].pk, "p0")]
    again = Task.objects.create(prompt="p0", cwd=str(tmp_path), agent="claude")
    assert rows.compiled(key, lambda: build("never built")) == [(made[0].pk, "p0"), (again.pk, "p0")]
    assert rows.compiled(("test", "p1"), lambda: build("p1")) == [(made[1].pk, "p1")]
    assert builds == ["p0", "p1"]
