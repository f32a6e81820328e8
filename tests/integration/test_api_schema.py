"""The REST API against its own OpenAPI schema: schemathesis generates requests from /v1/openapi.json (valid ones,
and ones the schema forbids) and sends them to the Django app in-process with a valid token (none on the cases meant
to be refused 401). Every answer must be
documented: no 5xx, a status the operation lists, and a body in the shape the schema gives for that status (errors:
{"error", "code", …}); a request the schema forbids must be refused with a 4xx.

Bounded to about two minutes on a small machine: SCHEMA_EXAMPLES generated cases per operation and phase (200 for
the 23 operations: lower it as operations are added, so that the whole stays within that bound).
"""

import os

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from jobs.actions import create_token
from jobs.web.api import api

pytestmark = pytest.mark.django_db

SCHEMA_EXAMPLES = int(os.environ.get("BRIDGE_SCHEMA_EXAMPLES", "200"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
CALLS: list[tuple[str, str, int]] = []  # (method, path, status) of every generated request, for the summary
TOKENS: list[str] = []  # the current test's token is the last


@pytest.fixture
def token(db) -> str:
    """The token schemathesis sends (BearerToken), made on this test's database."""
    TOKENS.append(create_token("schemathesis")[1])
    return TOKENS[-1]


@pytest.fixture(autouse=True)
def in_process(work_root, settings):
    """Django's WSGI app on the test database: like Django's test client, it keeps the test's connection open
    between requests (Django closes it when a request finishes, which would end the test's transaction)."""
    settings.BRIDGE_MAX_QUEUED = 10_000  # the run makes many tasks; a full queue (429) is tested elsewhere
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# The schema the server serves at /v1/openapi.json (test_api.py checks it is served), sent to the app in-process.
schema = schemathesis.openapi.from_dict(api.get_openapi_schema())
schema.app = get_wsgi_application()


@schema.auth(refresh_interval=None)
class BearerToken:
    """A valid token on every generated request, except those schemathesis sends without one on purpose (they must
    be answered 401)."""

    def get(self, case, context) -> str:
        return TOKENS[-1] if TOKENS else "no-token-yet"  # schemathesis may ask while collecting

    def set(self, case, data: str, context) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@schema.parametrize()
@settings(
    max_examples=SCHEMA_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_every_answer_is_documented(case, token):
    response = case.call()
    CALLS.append((case.method, case.path, response.status_code))
    case.validate_response(response, checks=CHECKS)


def test_the_generated_run_was_real(request):
    """Every documented operation has a generated test (a schema that failed to load has none), and what this
    process sent got no 5xx. Under pytest-xdist an operation's test may run in another process, so the operations
    are read from the collection, which every process shares, not from the requests this one sent."""
    collected = {getattr(item, "operation_label", None) for item in request.session.items} - {None}
    documented = {f"{method.upper()} {path}" for path, item in schema.raw_schema["paths"].items() for method in item}
    assert documented <= collected, sorted(collected)
    if not CALLS:
        pytest.skip("no operation's generated test ran in this process")
    by_operation: dict[str, dict[int, int]] = {}
    for method, path, status in CALLS:
        counts = by_operation.setdefault(f"{method} {path}", {})
        counts[status] = counts.get(status, 0) + 1
    summary = "; ".join(f"{op}: {dict(sorted(c.items()))}" for op, c in sorted(by_operation.items()))
    print(f"\nschemathesis sent {len(CALLS)} generated requests: {summary}")
    assert all(status < 500 for _, _, status in CALLS)
