"""The book of live rules (jobs/actions/rules.py, `RuleBook`): what it indexes a rule by never hides a rule that
matches a request, and a request from a task whose agent session is linked reads no row but the rules' stamp."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jobs import actions
from jobs.actions import rules
from jobs.core.permission_rules import RuleError, matches, parse
from tests.support import make_task

LABELS = ["docs", "python", "org", "a", "x-y", "PYTHON", "*", "py*"]
ODD_URLS = [
    "https://docs.python.org./x",
    "https://docs.python.org:8443/x",
    "http://user@docs.python.org/",
    "https://docs%2Epython.org/",
    "https://docs.python.org\\@evil.org/",
    "ftp://docs.python.org/",
    "https://[::1]/",
    "docs.python.org",
    "",
]
URLS = st.one_of(
    st.lists(st.sampled_from(LABELS[:6]), min_size=1, max_size=4).map(lambda labels: f"https://{'.'.join(labels)}/p"),
    st.sampled_from(ODD_URLS),
)


@settings(max_examples=1000, deadline=None)
@given(
    rule_labels=st.lists(st.sampled_from(LABELS), min_size=1, max_size=3),
    subdomains=st.booleans(),
    url=URLS,
    decision=st.sampled_from(["allow", "ask", "deny"]),
)
@example(rule_labels=["python", "org"], subdomains=True, url="https://docs.python.org/p", decision="allow")
@example(rule_labels=["python", "org"], subdomains=False, url="https://docs%2Epython.org/", decision="deny")
def test_a_webfetch_rule_matches_only_urls_under_its_indexed_domain(rule_labels, subdomains, url, decision):
    """The book looks at a WebFetch rule only for URLs whose host is or lies under its `rule_domain` (all of them
    when no host can be read): never one it matches."""
    try:
        pattern = parse(f"WebFetch(domain:{'*.' if subdomains else ''}{'.'.join(rule_labels)})")
    except RuleError:
        return
    domain, held = rules.rule_domain(pattern), rules.url_domains(url)
    if matches(pattern, "WebFetch", {"url": url}, "/w", decision):
        assert domain is None or held is None or domain in held, (pattern, url)


@pytest.mark.django_db(transaction=True)
def test_a_rule_for_an_agent_session_is_found_without_reading_the_task_again(work_root, django_assert_num_queries):
    task = make_task("x")
    session = actions.link_session(task, "s-1")
    actions.add_rule("Bash(make)", "allow", root=task.cwd, agent=task.agent, session=session)
    other = make_task("y")
    assert rules.decide_by_rules(other, "Bash", {"command": "make"}) is None, "another session's task: not its rule"
    with django_assert_num_queries(1):  # the rules' stamp, no more
        found = rules.decide_by_rules(task, "Bash", {"command": "make"})
    assert found is not None and found[0] == "allow"
