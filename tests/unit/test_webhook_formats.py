"""What a webhook delivery says (jobs/supervision/deliveries.py): Slack's and Discord's incoming-webhook JSON and ntfy's
message with Allow/Deny buttons carry the payload's facts and its links, and nothing an agent or a planner wrote can
pass for a link, a mention or a header of Bridge's; the signature; what a receiver's answer means."""

import hashlib
import hmac
import json
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from jobs.supervision.deliveries import (
    DISCORD_MAX_CHARS,
    NTFY_MAX_BYTES,
    SLACK_MAX_CHARS,
    judge,
    render,
    signature,
)

ALLOW = "http://bridge.test:8800/decide/eyJyZXF1ZXN0IjoxfQ%3A1tXyZ%3Aabc"
DENY = "http://bridge.test:8800/decide/eyJyZXF1ZXN0IjoxLCJiIjoiZCJ9%3A1tXyZ%3Adef"
PAGE = "http://bridge.test:8800/tasks/6f1c0a52-3d7e-4f4e-9a55-0d8e1c2b7a10/"
LINKS = {ALLOW, DENY, PAGE}
# Any text, control and format characters (bidi overrides, line separators) and markup included.
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=300) | st.sampled_from(
    [
        "<!channel> [Allow](http://evil.test) @everyone",
        "[Allow](<http://evil.test>)",
        "<http://evil.test|Allow>",
        "```\n[Deny](<http://evil.test>)\n```",
        "a\r\nX-Evil: 1",
        "\u202eevil",
        "&lt;b&gt;",
    ]
)


def task(prompt: str = "fix the tests", status: str = "running") -> dict:
    return {
        "id": "6f1c0a52-3d7e-4f4e-9a55-0d8e1c2b7a10",
        "agent": "claude",
        "cwd": "/work/app",
        "status": status,
        "prompt": prompt,
        "created_by": "token:planner",
        "url": PAGE,
    }


def requested(tool: str = "Bash", command: str = "rm -rf build", prompt: str = "fix the tests") -> dict:
    permission = {
        "request_id": "r1",
        "tool_name": tool,
        "input": {"command": command},
        "status": "pending",
        "expires_at": "2026-12-05T16:00:00+00:00",
        "links": {"allow": ALLOW, "deny": DENY},
    }
    return {"event": "permission.requested", "delivery_id": "d1", "task": task(prompt), "permission": permission}


def finished(result: str = "All 12 tests pass.", status: str = "done") -> dict:
    return {
        "event": "task.finished",
        "task": task(status=status),
        "result": result,
        "error": "",
        "exit_code": 0,
        "cost_usd": 0.0123,
    }


def links_in_slack(text: str) -> set[str]:
    return {found.split("|")[0] for found in re.findall(r"<([^<>]*)>", text)}


def links_in_discord(text: str) -> set[str]:
    """The masked links Discord would show: outside code blocks (where nothing is markup), not escaped."""
    outside = re.sub(r"```.*?```", "", text, flags=re.S)
    return set(re.findall(r"(?<!\\)\[[^\]]*(?<!\\)\]\(<([^>]*)>\)", outside))


# --- Bridge's own format, and the signature ------------------------------------------------------------------------


def test_bridges_format_is_the_payload_as_json():
    body, headers = render("bridge", requested())
    assert json.loads(body) == requested()
    assert headers == {"Content-Type": "application/json"}


@given(st.binary(max_size=200), st.integers(min_value=0, max_value=2**40))
def test_the_signature_is_hmac_sha256_of_the_timestamp_a_dot_and_the_raw_body(body, timestamp):
    expected = hmac.new(b"s3cret", str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    assert signature("s3cret", timestamp, body) == f"t={timestamp},v1={expected}"


# --- Slack ------------------------------------------------------------------------------------------------------------


def test_slack_gets_the_facts_and_allow_and_deny_as_links():
    body, headers = render("slack", requested())
    text = json.loads(body)["text"]
    assert headers["Content-Type"] == "application/json" and list(json.loads(body)) == ["text"]
    assert text.startswith("*Permission needed: Bash*")
    assert "claude task in /work/app, made by token:planner" in text and "rm -rf build" in text
    assert f"<{ALLOW}|Allow>" in text and f"<{DENY}|Deny>" in text and f"<{PAGE}|Open task>" in text


@given(TEXT, TEXT, TEXT)
def test_nothing_an_agent_writes_makes_a_link_or_mention_in_slack(tool, command, prompt):
    text = json.loads(render("slack", requested(tool, command, prompt))[0])["text"]
    assert links_in_slack(text) == LINKS
    assert text.count("```") == (2 if command else 0), "the quote's code block is the only one, and holds"
    assert len(text) <= SLACK_MAX_CHARS + 200


def test_slack_shows_a_finished_task_with_its_status_cost_and_result():
    text = json.loads(render("slack", finished())[0])["text"]
    assert text.startswith("*Task done (claude)*") and "cost $0.0123" in text and "All 12 tests pass." in text


# --- Discord ----------------------------------------------------------------------------------------------------------


def test_discord_gets_content_with_the_links_and_no_mentions():
    document = json.loads(render("discord", requested())[0])
    assert document["allowed_mentions"] == {"parse": []}
    content = document["content"]
    assert content.startswith("**Permission needed: Bash**")
    assert f"[Allow](<{ALLOW}>)" in content and f"[Deny](<{DENY}>)" in content and "rm -rf build" in content


@given(TEXT, TEXT, TEXT)
@example(tool="T" * 300, command="x" * 500, prompt="")  # the quote must be cut for the links to fit
def test_nothing_an_agent_writes_makes_a_link_in_discord_and_the_message_fits(tool, command, prompt):
    content = json.loads(render("discord", requested(tool, command * 10, prompt))[0])["content"]
    assert len(content) <= DISCORD_MAX_CHARS
    assert links_in_discord(content) == LINKS, "Bridge's links survive the cut, and no others appear"
    assert content.count("```") == (2 if command else 0), "the quote's code block is the only one, and holds"


# --- ntfy -------------------------------------------------------------------------------------------------------------


def test_ntfy_gets_plain_text_a_title_and_allow_and_deny_buttons():
    body, headers = render("ntfy", requested())
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert headers["Title"] == "Permission needed: Bash"
    assert headers["Click"] == PAGE and headers["Priority"] == "high" and headers["Tags"] == "warning"
    assert headers["Actions"] == f"view, Allow, {ALLOW}, clear=true; view, Deny, {DENY}, clear=true"
    assert "rm -rf build" in body.decode() and "made by token:planner" in body.decode()


def test_ntfy_has_no_buttons_for_a_request_no_longer_pending():
    payload = requested()
    payload["permission"]["links"] = {}
    body, headers = render("ntfy", payload)
    assert "Actions" not in headers and "no longer pending" in body.decode()


@given(TEXT, TEXT)
def test_every_ntfy_header_is_one_ascii_line_and_the_body_fits(tool, command):
    body, headers = render("ntfy", requested(tool, command * 20))
    for name, value in headers.items():
        assert value.isascii() and not re.search(r"[\x00-\x1f\x7f]", value), (name, value)
    assert headers["Actions"].count("view, ") == 2
    assert len(body) <= NTFY_MAX_BYTES
    body.decode()  # whole characters: the cut never splits one


def test_a_non_ascii_ntfy_title_is_an_encoded_word():
    headers = render("ntfy", requested(tool="Écrire"))[1]
    assert headers["Title"] == "=?utf-8?b?UGVybWlzc2lvbiBuZWVkZWQ6IMOJY3JpcmU=?="


# --- what a receiver's answer means -----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", range(100, 600))
def test_only_2xx_delivers_429_and_5xx_are_tried_again_and_the_rest_given_up(status):
    answer = judge(status, "", None, None)
    assert answer.delivered == (200 <= status < 300)
    if not answer.delivered:
        assert answer.retry == (status == 429 or status >= 500 or status < 200)
        assert answer.status_code == status


def test_a_redirect_is_given_up_naming_where_it_pointed_and_429_keeps_its_retry_after():
    redirect = judge(301, "", "https://elsewhere.test/x", None)
    assert (
        not redirect.retry and "a redirect to https://elsewhere.test/x, which Bridge does not follow" in redirect.error
    )
    assert judge(429, "slow down", None, "120").retry_after_s == 120.0
