"""One-tap decisions: the page a decision link opens (no login: the signed link is the authority, jobs/actions/links.py)
and the list of every pending decision for a logged-in person, both built for a phone.

A link's token is in its URL, so these pages are never cached, their URL is never sent on as a Referer, and they
are never indexed. Opening a link (GET, or HEAD from a link preview) never decides: only the page's form does, a POST
with Django's CSRF token.
"""

import json
from collections.abc import Callable
from functools import wraps
from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_safe

from jobs import actions
from jobs.actions import tokens
from jobs.core.access import Scope
from jobs.core.errors import BridgeError, InvalidInput
from jobs.core.vocabulary import PermissionStatus
from jobs.models import PermissionRequest
from jobs.web import auth
from jobs.web.views import page_errors

PROMPT_SHOWN_CHARS = 300  # the head of the task's prompt
INPUT_SHOWN_CHARS = 4000  # a tool's input, pretty-printed, on a link's page
LISTED_INPUT_CHARS = 600  # and on the list, where many stand one under another
FROM_LIST = "pending"  # the list's buttons say so, to come back to it


def private(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A page whose URL or forms hold a decision link's token: no cache keeps it, no Referer carries its URL, no
    search engine lists it."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        response = view(request, *args, **kwargs)
        add_never_cache_headers(response)
        # Never the path (the token) in a Referer, only the origin; not "no-referrer", with which a browser sends
        # the form's POST with "Origin: null", which the CSRF check rightly refuses.
        response["Referrer-Policy"] = "strict-origin"
        response["X-Robots-Tag"] = "noindex, nofollow"
        return response

    return wrapper


def shown(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def request_facts(perm: PermissionRequest, input_chars: int) -> dict:
    """What a person needs to decide a request: its task, the tool, and the tool's input pretty-printed."""
    return {
        "perm": perm,
        "task": perm.task,
        "prompt": shown(perm.task.prompt, PROMPT_SHOWN_CHARS),
        "input": shown(json.dumps(perm.input, indent=2, ensure_ascii=False), input_chars),
    }


@private
@require_http_methods(["GET", "HEAD", "POST"])
def decide_link(request: HttpRequest, token: str) -> HttpResponse:
    """What a decision link asks, and the one button that decides it (a deny link's form takes a message for the
    agent); a link that decides nothing is a page saying why, showing nothing its token did not prove."""
    try:
        link = actions.read_link(token)
    except BridgeError as refused:
        return refused_page(request, refused)
    if request.method != "POST":
        return confirmation(request, link)
    message = request.POST.get("message", "") if link.behavior == "deny" else ""
    caller = auth.authenticate(request)
    try:
        perm = actions.decide_by_link(token, message, by=caller.name if caller else "")  # "": the link decided
    except InvalidInput as exc:  # the message cannot be stored: said on the form, with what was typed kept
        return confirmation(request, link, error=exc.message, message=message, status=exc.http_status)
    except BridgeError as refused:  # answered or expired since the page was opened
        return refused_page(request, refused)
    if request.POST.get("back") == FROM_LIST and request.user.is_authenticated:
        messages.success(request, f"{perm.status.capitalize()}: {perm.tool_name} for task {perm.task.public_id}.")
        return redirect("decide-pending")
    return render(request, "jobs/decide.html", {"decided": perm, "allowed": perm.status == PermissionStatus.ALLOWED})


def confirmation(
    request: HttpRequest, link: actions.Link, error: str = "", message: str = "", status: int = 200
) -> HttpResponse:
    """An open link's page: the request and its one button (after a refused press, why, with the message kept)."""
    context = {**request_facts(link.request, INPUT_SHOWN_CHARS), "behavior": link.behavior}
    return render(request, "jobs/decide.html", {**context, "error": error, "message": message}, status=status)


def refused_page(request: HttpRequest, refused: BridgeError) -> HttpResponse:
    """A link that decides nothing: forged or cut short (400), or answered, by whom and how, or expired (409)."""
    return render(request, "jobs/decide.html", {"refused": refused}, status=refused.http_status)


@private
@login_required
@require_safe
@page_errors
def pending_decisions(request: HttpRequest) -> HttpResponse:
    """Every request waiting for a decision that the caller may see, oldest first, each with Allow and Deny buttons
    that post to its links (only for a caller who may decide: the links are that power)."""
    who = auth.require(request, Scope.READ)
    may_decide = who.has(Scope.DECIDE)
    waiting = tokens.seen_permissions(who, actions.pending_permissions())
    items = [
        {**request_facts(perm, LISTED_INPUT_CHARS), "links": link_paths(perm) if may_decide else {}} for perm in waiting
    ]
    context = {"items": items, "may_decide": may_decide, "who": who, "from_list": FROM_LIST}
    return render(request, "jobs/pending.html", context)


def link_paths(perm: PermissionRequest) -> dict[str, str]:
    """A request's decision links as paths, so its buttons post to the address this page was opened at, whatever
    BRIDGE_PUBLIC_URL names."""
    return {behavior: urlsplit(url).path for behavior, url in actions.decision_links(perm).items()}
