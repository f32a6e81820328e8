"""A token sent where Bridge does not read one (a header other APIs use, a query parameter) gets a 401 that says
where it was seen and where it belongs (Authorization: Bearer …), and never repeats the token: on the REST API, the
SSE stream and the API docs page alike.

The places are this test's own list, the common mistakes (so dropping one from jobs/web/auth.py fails here); the
token, the place's spelling and the endpoint are generated.
"""

import string

import pytest
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions

pytestmark = pytest.mark.django_db

HEADERS = ("X-API-Key", "X-Auth-Token", "X-Access-Token", "API-Key", "Token")
QUERY = ("token", "api_key", "access_token", "apikey", "auth_token")
ENDPOINTS = (
    ("get", "/v1/tasks", {}),
    ("get", "/v1/task", {"task_id": "6f1c0000-0000-4000-8000-000000000000"}),
    ("post", "/v1/task/create", {}),
    ("get", "/v1/task/output/stream", {"task_id": "6f1c0000-0000-4000-8000-000000000000"}),
    ("get", "/v1/docs", {}),
)
BELONGS = "'Authorization: Bearer <token>'"
URLSAFE = string.ascii_letters + string.digits + "-_"
SETTINGS = hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def real_token() -> str:
    return actions.create_token("misplaced")[1]


def tokens(real: str) -> st.SearchStrategy[str]:
    """A real token (it must be refused too: Bridge reads none from there), or another of a token's shape."""
    return st.just(real) | st.text(URLSAFE, min_size=20, max_size=60).map(lambda rest: "brg_" + rest)


def any_case(name: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(
        lambda upper: "".join(c.upper() if u else c.lower() for c, u in zip(name, upper, strict=True))
    )


def send(endpoint: tuple, headers: dict, query: dict):
    method, path, params = endpoint
    query_string = "&".join(f"{name}={value}" for name, value in {**params, **query}.items())
    url = f"{path}?{query_string}" if query_string else path
    if method == "post":
        return Client().post(url, '{"prompt": "say hi"}', content_type="application/json", headers=headers)
    return Client().get(url, headers={"Accept": "application/json", **headers})


def assert_refused_naming(response, token: str, place: str) -> dict:
    """401 `misplaced`, naming `place` and where a token belongs, with the token nowhere in the answer."""
    assert response.status_code == 401, (response.status_code, response.content)
    body = response.json()
    assert (body["code"], body["reason"]) == ("unauthenticated", "misplaced"), body
    assert place.lower() in body["error"].lower() and place.lower() in body["seen_in"].lower(), body
    assert BELONGS in body["error"], body
    assert token not in response.content.decode(), "the token was echoed"
    assert all(token not in value for _, value in response.items()), "the token was echoed in a header"
    return body


@SETTINGS
@given(data=st.data())
def test_a_token_in_a_header_bridge_does_not_read_is_a_401_naming_that_header_and_authorization(real_token, data):
    name = data.draw(st.sampled_from(HEADERS).flatmap(any_case), label="header")
    token = data.draw(tokens(real_token), label="token")
    endpoint = data.draw(st.sampled_from(ENDPOINTS), label="endpoint")

    response = send(endpoint, {name: token}, {})

    assert_refused_naming(response, token, name)


@SETTINGS
@given(data=st.data())
def test_a_token_in_the_query_is_a_401_naming_that_parameter_and_authorization(real_token, data):
    name = data.draw(st.sampled_from(QUERY).flatmap(any_case), label="parameter")
    token = data.draw(tokens(real_token), label="token")
    endpoint = data.draw(st.sampled_from(ENDPOINTS), label="endpoint")

    response = send(endpoint, {}, {name: token})

    assert_refused_naming(response, token, f"'{name.lower()}'")


def test_a_token_in_the_url_is_told_it_may_be_in_logs_and_how_to_replace_it(real_token):
    in_url = send(ENDPOINTS[0], {}, {"token": real_token}).json()
    in_header = send(ENDPOINTS[0], {"X-API-Key": real_token}, {}).json()

    assert "revoke" in in_url["error"] and "logs" in in_url["error"]
    assert "revoke" not in in_header["error"], "a header is not written to logs: nothing to replace"


def test_the_authorization_header_decides_whatever_else_was_sent(real_token):
    let_in = send(ENDPOINTS[0], {"Authorization": f"Bearer {real_token}", "X-API-Key": real_token}, {})
    malformed = send(ENDPOINTS[0], {"Authorization": "Token abc", "X-API-Key": real_token}, {})

    assert let_in.status_code == 200
    assert (malformed.status_code, malformed.json()["reason"]) == (401, "malformed")


def test_an_empty_misplaced_field_is_no_credential(real_token):
    body = send(ENDPOINTS[0], {"X-API-Key": " "}, {"token": ""}).json()

    assert body["reason"] == "missing"
