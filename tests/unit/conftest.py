"""Unit tests: one module's rules, with no database and no Bridge server. A test here that asks for the database
fails at once, naming where it belongs."""

import pytest

DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}


@pytest.fixture(autouse=True)
def _no_database(request):
    if DATABASE_FIXTURES & set(request.fixturenames) or request.node.get_closest_marker("django_db"):
        pytest.fail(f"{request.node.nodeid} uses the database: it belongs in tests/integration/")
