"""The reads Bridge makes on every request, ring and stream batch, in SQL written once per process.

Django builds a query's SQL anew on every call, and for the small reads on the hot path that is nearly all of their
cost: reading a task by its id took 0.58 ms through the ORM (0.89 ms with its session and supervisor joined), of
which running the SQL on SQLite was 0.05 ms; the pending-questions read took 0.72 ms and the token read 0.32 ms.
Every REST request, permission answer, stream batch and run woken by a ring makes two or three such reads
(docs/architecture.md, "Process model", under "Database").

`select` reads whole rows of a model by equality (and at most one "greater than") on its columns, with the SQL text
kept per shape, the values prepared by each field as the ORM prepares them, and each column converted back as the
ORM converts it, so what it returns are ordinary model instances (they save, refresh and follow relations as any
other). Its `related` reads the rows foreign keys point to in the same statement, as `select_related` does (a task
read with its session and supervisor was three reads before, 0.23 ms each in a busy server), and `refresh` stands in
for `refresh_from_db`. `compiled` runs a query the ORM builds (any filter it can express) with the SQL it built the
first time, for a query whose SQL depends only on a key the caller gives (the claim's). Everything else, and every
write, stays with the ORM.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from django.db import connections
from django.db.models import Field, ForeignObject, ForeignObjectRel, Model, QuerySet
from django.db.models.expressions import Col
from django.db.models.fields.mixins import FieldCacheMixin

M = TypeVar("M", bound=Model)
_compiled_statements: dict[tuple, tuple[str, tuple]] = {}  # see `compiled`


def select(
    model: type[M],
    *,
    above: dict[str, Any] | None = None,
    order_by: tuple[str, ...] = (),
    limit: int | None = None,
    related: tuple[str, ...] = (),
    using: str = "default",
    **equal: Any,
) -> list[M]:
    """Rows of `model` whose columns equal the given values (None: IS NULL) and are greater than those in `above`,
    in `order_by` (field names, "-" for descending), at most `limit` of them. Name a foreign key by its column
    (`task_id=`) and give it an id. Each foreign key named in `related` holds the row it points to, read in the same
    statement (None when the key is null or its row is gone)."""
    connection = connections[using]
    above = above or {}
    shape = tuple((name, "IS NULL" if value is None else "=") for name, value in equal.items())
    shape += tuple((name, ">") for name in above)
    statement = _statement(model, shape, order_by, limit is not None, related, using, connection.vendor)
    values = {**equal, **above}
    params = [field.get_db_prep_value(values[name], connection) for name, field in statement.parameters]
    if limit is not None:
        params.append(int(limit))
    with connection.cursor() as cursor:
        cursor.execute(statement.sql, params)
        return [_instance(model, _converted(row, statement, connection), statement, using) for row in cursor]


def _instance(model: type[M], values: list, statement: "Statement", using: str) -> M:
    """The row's instance of `model`, holding the related rows read with it."""
    own = len(statement.attnames)
    instance = model.from_db(using, statement.attnames, values[:own])
    for joined in statement.joined:
        part = values[joined.start : joined.start + len(joined.attnames)]
        related = joined.model
        found = part[joined.attnames.index(related._meta.pk.attname)] is not None
        setattr(instance, joined.name, related.from_db(using, joined.attnames, part) if found else None)
    return instance


def compiled(key: tuple, build: Callable[[], QuerySet], using: str = "default") -> list[tuple]:
    """The rows of `build()`, a `values_list` query whose SQL and parameters depend only on `key` (and the database):
    the ORM compiles it the first time, and later calls run that SQL as it was. Columns come back as the database
    gives them, so it suits columns the ORM does not convert (ids, text)."""
    connection = connections[using]
    full_key = (using, connection.vendor, *key)
    statement = _compiled_statements.get(full_key)
    if statement is None:
        statement = _compiled_statements[full_key] = build().query.get_compiler(using).as_sql()
    with connection.cursor() as cursor:
        cursor.execute(*statement)
        return cursor.fetchall()


def refresh(instance: Model, using: str = "default") -> None:
    """`instance.refresh_from_db()` by one `select`: every column read again, and, as there, the related objects it
    holds dropped (they are read again when next used). Raises the model's DoesNotExist if the row is gone."""
    model = type(instance)
    found = select(model, using=using, **{model._meta.pk.attname: instance.pk})
    if not found:
        gone = model.DoesNotExist  # type: ignore[attr-defined]  # each model class has one; type[Model] has not
        raise gone(f"{model.__name__} {instance.pk} is gone")
    for field in model._meta.concrete_fields:
        setattr(instance, field.attname, getattr(found[0], field.attname))
    relations: list[Field | ForeignObjectRel] = [*model._meta.concrete_fields, *model._meta.related_objects]
    for relation in relations:  # each relation of either list is a FieldCacheMixin (RelatedField, ForeignObjectRel)
        if isinstance(relation, FieldCacheMixin) and relation.is_relation and relation.is_cached(instance):
            relation.delete_cached_value(instance)


def _converted(row: tuple, statement: "Statement", connection) -> list:
    values = list(row)
    for position, field_converters, column in statement.converters:
        for convert in field_converters:
            values[position] = convert(values[position], column, connection)
    return values


@dataclass(frozen=True)
class Joined:
    name: str  # the foreign key's name on the model read
    model: type[Model]  # the model it points to
    start: int  # where its columns begin in the row
    attnames: list[str]  # of its columns, in order


@dataclass(frozen=True)
class Statement:
    sql: str
    parameters: list[tuple[str, Field]]  # (the name the caller gave, its field), in the order of the placeholders
    attnames: list[str]  # of the model's own columns, in order (they come first in the row)
    converters: list[tuple[int, list, Col]]  # (position in the row, the ORM's converters for that column, the column)
    joined: list[Joined]  # the related rows read with it, their columns after the model's own


@cache
def _statement(
    model: type[Model],
    shape: tuple,
    order_by: tuple[str, ...],
    limited: bool,
    related: tuple[str, ...],
    using: str,
    vendor: str,
) -> Statement:
    """The SQL of one shape of read, and what turns its rows into the values the ORM would give. Made once per
    process; the converters are the ones the ORM applies on this kind of database (dates on SQLite, JSON)."""
    meta = model._meta
    connection = connections[using]
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    parameters = []
    conditions = []
    for name, operator in shape:
        field = _field(model, name)
        column = f"{table}.{quote(field.column)}"
        if operator == "IS NULL":
            conditions.append(f"{column} IS NULL")
        else:
            conditions.append(f"{column} {operator} %s")
            parameters.append((name, field))
    columns, converters = _columns(model, meta.db_table, 0, connection)
    joins, joined = [], []
    for number, name in enumerate(related):
        key, target = _foreign_key(model, name)
        alias = f"related{number}"
        joins.append(
            f" LEFT OUTER JOIN {quote(target._meta.db_table)} {quote(alias)} ON "
            f"{quote(alias)}.{quote(key.target_field.column)} = {table}.{quote(key.column)}"
        )
        start = len(columns)
        more, more_converters = _columns(target, alias, start, connection)
        columns += more
        converters += more_converters
        joined.append(Joined(name, target, start, [f.attname for f in target._meta.concrete_fields]))
    sql = f"SELECT {', '.join(columns)} FROM {table}{''.join(joins)}"
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    if order_by:
        sql += " ORDER BY " + ", ".join(
            f"{table}.{quote(_field(model, name.lstrip('-')).column)}" + (" DESC" if name.startswith("-") else "")
            for name in order_by
        )
    if limited:
        sql += " LIMIT %s"
    return Statement(sql, parameters, [f.attname for f in meta.concrete_fields], converters, joined)


def _columns(model: type[Model], alias: str, start: int, connection) -> tuple[list[str], list]:
    """The model's columns as read from `alias`, and their converters by position in the row (`start` onwards). The
    converters are bound to this thread's connection, but read only settings: any thread's connection can use them."""
    quote = connection.ops.quote_name
    columns, converters = [], []
    for position, field in enumerate(model._meta.concrete_fields, start):
        columns.append(f"{quote(alias)}.{quote(field.column)}")
        column = field.get_col(alias)
        own = field.get_db_converters(connection)  # type: ignore[attr-defined]  # Field has it; its stubs do not
        field_converters = connection.ops.get_db_converters(column) + own
        if field_converters:
            converters.append((position, field_converters, column))
    return columns, converters


def _foreign_key(model: type[Model], name: str) -> tuple[ForeignObject, type[Model]]:
    """A foreign key by its name, and the model it points to (a class once the apps are loaded, never "self")."""
    key = model._meta.get_field(name)
    if not isinstance(key, ForeignObject) or isinstance(key.related_model, str):
        raise ValueError(f"{model.__name__}.{name} is not a foreign key")
    return key, key.related_model


def _field(model: type[Model], name: str) -> Field:
    """A concrete field by its name or its column's attribute name (`task` or `task_id`)."""
    for field in model._meta.concrete_fields:
        if name in (field.name, field.attname):
            return field
    raise ValueError(f"{model.__name__} has no column {name!r}")
