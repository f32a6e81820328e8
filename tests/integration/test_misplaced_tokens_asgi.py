"""A token sent where Bridge does not read one, on the interfaces Django's views do not serve: the websockets and MCP
over HTTP (`/mcp`) refuse it as REST does (tests/integration/test_misplaced_tokens.py), in words that name where it
was seen and where a token belongs, without repeating it.

The places are this test's own list of common mistakes; the token, the place's spelling and the endpoint are
generated.
"""

import json
import string

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator, WebsocketCommunicator
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from bridge.asgi import application
from jobs import actions

pytestmark = pytest.mark.django_db(transaction=True)  # the consumers and /mcp read on threads of their own

HOST = (b"host", b"127.0.0.1:8800")
HEADERS = ("X-API-Key", "X-Auth-Token", "X-Access-Token", "API-Key", "Token")
QUERY = ("token", "api_key", "access_token", "apikey", "auth_token")
SOCKETS = ("/ws/tasks/", "/ws/tasks/6f1c0000-0000-4000-8000-000000000000/")
BELONGS = "'Authorization: Bearer <token>'"
URLSAFE = string.ascii_letters + string.digits + "-_"
LIST_TOOLS = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
SETTINGS = hypothesis_settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def real_token(transactional_db) -> str:
    return actions.create_token("misplaced-asgi")[1]


def tokens(real: str) -> st.SearchStrategy[str]:
    """A real token (refused too: Bridge reads none from there), or another of a token's shape."""
    return st.just(real) | st.text(URLSAFE, min_size=20, max_size=60).map(lambda rest: "brg_" + rest)


def any_case(name: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(
        lambda upper: "".join(c.upper() if u else c.lower() for c, u in zip(name, upper, strict=True))
    )


def misplaced(data: st.DataObject, real_token: str) -> tuple[str, list[tuple[bytes, bytes]], str, str]:
    """A token sent in a header or a query parameter Bridge does not read: (query string, headers, token, and the
    words that name where it was seen)."""
    token = data.draw(tokens(real_token), label="token")
    if data.draw(st.booleans(), label="in a header"):
        name = data.draw(st.sampled_from(HEADERS).flatmap(any_case), label="header")
        return "", [(name.encode(), token.encode())], token, f"the {name} header"
    name = data.draw(st.sampled_from(QUERY).flatmap(any_case), label="parameter")
    return f"?{name}={token}", [], token, f"query parameter '{name.lower()}'"


def socket_refusal(path: str, headers: list[tuple[bytes, bytes]]) -> tuple[dict, int]:
    """What a websocket at `path` says before it closes, and its close code."""

    async def body() -> tuple[dict, int]:
        ws = WebsocketCommunicator(application, path, headers=[HOST, *headers])
        assert (await ws.connect(timeout=10))[0]
        message = await ws.receive_json_from(timeout=10)
        return message, (await ws.receive_output(timeout=10))["code"]

    return async_to_sync(body)()


def mcp_answer(query: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, dict, dict]:
    """/mcp's status, JSON body and headers for a tools/list sent with these headers and query."""
    sent = [HOST, (b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]
    mcp = HttpCommunicator(application, "POST", f"/mcp{query}", body=LIST_TOOLS, headers=[*sent, *headers])
    response = async_to_sync(mcp.get_response)()
    answered = {name.decode().lower(): value.decode() for name, value in response["headers"]}
    return response["status"], json.loads(response["body"]), answered


@SETTINGS
@given(data=st.data())
def test_a_websocket_opened_with_a_misplaced_token_is_refused_naming_where_it_was_seen(real_token, data):
    query, headers, token, place = misplaced(data, real_token)
    path = data.draw(st.sampled_from(SOCKETS), label="socket")

    message, code = socket_refusal(path + query, headers)

    assert (message["type"], message["code"], code) == ("error", "unauthenticated", 4401), message
    assert place.lower() in message["message"].lower() and BELONGS in message["message"], message
    assert token not in json.dumps(message), "the token was echoed"


@SETTINGS
@given(data=st.data())
def test_mcp_over_http_with_a_misplaced_token_is_a_401_naming_where_it_was_seen(real_token, data):
    query, headers, token, place = misplaced(data, real_token)

    status, body, answered = mcp_answer(query, headers)

    assert (status, body["code"], body["reason"]) == (401, "unauthenticated", "misplaced"), body
    assert place.lower() in body["error"].lower() and place.lower() in body["seen_in"].lower(), body
    assert BELONGS in body["error"] and answered["www-authenticate"] == 'Bearer realm="bridge"', body
    assert token not in json.dumps(body) and all(token not in value for value in answered.values())


def test_on_mcp_the_authorization_header_decides_whatever_else_was_sent(real_token):
    status, body, _ = mcp_answer("", [(b"authorization", b"Token abc"), (b"x-api-key", real_token.encode())])

    assert (status, body["reason"]) == (401, "malformed"), body


def test_on_a_websocket_an_empty_misplaced_field_is_no_credential(real_token):
    message, code = socket_refusal("/ws/tasks/?token=&api_key=%20", [(b"x-api-key", b" ")])

    assert code == 4401 and "authentication required" in message["message"], message
