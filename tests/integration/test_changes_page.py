"""What a task changed, where people read it besides the Changes tab (tests/browser/test_changes_tab.py): read-only
in the task's admin page; and the task page alone loads the diff renderer."""

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from jobs import actions
from jobs.admin import changed_files_html
from jobs.models import Task
from tests.support import make_task

pytestmark = pytest.mark.django_db(transaction=True)

HTML_NAME = "<img src=x onerror=alert(1)>.txt"


@pytest.fixture
def admin_client_(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    return client


def recorded(task: Task, cwd: Path, edit) -> None:
    """Snapshot `cwd` as the supervisor does when the agent starts, run `edit`, and record what changed."""
    snapshot = actions.take_snapshot(task, cwd)
    actions.begin_changes(task, snapshot)
    edit()
    assert actions.record_changes(task, actions.changes_since(snapshot))


def test_the_admin_shows_what_a_task_changed_with_file_names_as_text(work_root, admin_client_):
    (work_root / "notes.txt").write_text("one\ntwo\n")
    task = make_task("edit the notes")

    def edit() -> None:
        (work_root / "notes.txt").write_text("one\nTWO\nthree\n")
        (work_root / HTML_NAME).write_text("hello\n")

    recorded(task, work_root, edit)
    page = admin_client_.get(f"/admin/jobs/task/{task.pk}/change/").content.decode()
    assert "2 file(s) changed, +3 −1" in page
    assert '<div class="readonly">recorded</div>' in page
    assert "<li>modified <code>notes.txt</code> +2 −1</li>" in page
    assert f"<li>added <code>{html.escape(HTML_NAME)}</code> +1 −0</li>" in page
    assert HTML_NAME not in page
    patch = re.search(r'<pre class="changes-patch"[^>]*>(.*?)</pre>', page, re.S)
    assert patch is not None, page
    assert "\n-two\n+TWO\n+three\n" in html.unescape(patch.group(1))


def test_the_admin_says_what_the_limits_left_out(work_root, admin_client_, settings):
    settings.BRIDGE_CHANGES_MAX_FILES = 1
    task = make_task("write two files")

    def edit() -> None:
        for name in ("a.txt", "b.txt"):
            (work_root / name).write_text("new\n")

    recorded(task, work_root, edit)
    page = admin_client_.get(f"/admin/jobs/task/{task.pk}/change/").content.decode()
    assert "2 file(s) changed, +1 −0; not everything is shown: 1 more file past BRIDGE_CHANGES_MAX_FILES=1" in page
    assert "<li>added <code>a.txt</code> +1 −0</li>" in page and "b.txt" not in page


def test_the_admin_says_when_a_task_has_no_changes_recorded(work_root, admin_client_):
    task = make_task("never started")
    response = admin_client_.get(f"/admin/jobs/task/{task.pk}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert '<div class="readonly">none recorded: no snapshot was taken of its directory</div>' in page
    assert "changes-patch" not in page


def test_only_the_task_page_loads_the_diff_renderer(work_root, admin_client_):
    task = make_task("look at me")
    task_page = admin_client_.get(f"/tasks/{task.public_id}/").content.decode()
    dashboard = admin_client_.get("/").content.decode()
    for asset in ("vendor/diff2html/diff2html.min.js", "vendor/diff2html/diff2html.min.css"):
        assert asset in task_page and asset not in dashboard
    assert f'data-changes-url="/v1/task/changes?task_id={task.public_id}"' in task_page
    answer = admin_client_.get(f"/v1/task/changes?task_id={task.public_id}")
    assert answer.status_code == 200 and answer.json()["state"] == "none"


class _Listing(HTMLParser):
    """The elements of an HTML fragment and the text of its <code> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.names: list[str] = []
        self.in_code = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.add(tag)
        self.in_code = tag == "code"
        if self.in_code:
            self.names.append("")

    def handle_endtag(self, tag: str) -> None:
        self.in_code = False

    def handle_data(self, data: str) -> None:
        if self.in_code:
            self.names[-1] += data


# Paths as an agent may write them: any text a path can hold, pieced together with what means something to HTML.
MARKUP = ["<", ">", "&", "&amp;", "&#x3c;", '"', "'", "</code>", "<b>", HTML_NAME, "/"]
file_names = (
    st.lists(
        st.one_of(st.sampled_from(MARKUP), st.text(st.characters(exclude_characters="\0", exclude_categories=["Cs"]))),
        min_size=1,
        max_size=6,
    )
    .map("".join)
    .filter(bool)
)


@given(names=st.lists(file_names, min_size=1, max_size=5, unique=True))
def test_any_file_name_in_the_admins_list_stays_text(names):
    files = [{"path": name, "status": "added", "added": 1, "removed": 0, "binary": False} for name in names]
    listing = _Listing()
    listing.feed(changed_files_html(files))
    listing.close()
    assert listing.tags == {"ul", "li", "code"}
    assert listing.names == names
