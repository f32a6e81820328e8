"""One list of error codes (`ErrorCode`): every refusal names one, and the README and the OpenAPI schema show it."""

import ast
import json
import re
from pathlib import Path

import pytest

from jobs.core import errors
from jobs.core.errors import MEANINGS, BridgeError, ErrorCode
from tests.support import REPO

README_TABLE = re.compile(r"<!-- error-codes -->\n(.*?)\n<!-- /error-codes -->", re.S)


def rendered_table() -> str:
    rows = [f"| `{code}` | {meaning.http_status} | {meaning.text} |" for code, meaning in MEANINGS.items()]
    return "\n".join(["| code | HTTP | meaning |", "|---|---|---|", *rows])


def test_every_code_has_one_meaning_and_status():
    assert list(MEANINGS) == list(ErrorCode)
    assert all(100 <= meaning.http_status < 600 and meaning.text for meaning in MEANINGS.values())


def test_the_readme_table_is_the_list():
    found = README_TABLE.search((REPO / "README.md").read_text())
    assert found is not None, "README.md lost its <!-- error-codes --> table"
    assert found.group(1) == rendered_table(), "README.md's error table differs from ErrorCode; it should read:\n" + (
        rendered_table()
    )


@pytest.mark.parametrize("cls", BridgeError.__subclasses__(), ids=lambda cls: cls.__name__)
def test_each_refusal_class_answers_with_its_codes_status(cls):
    assert cls.http_status == MEANINGS[cls.code].http_status


@pytest.mark.parametrize("code", list(ErrorCode))
def test_a_raise_naming_a_code_gets_its_status(code):
    assert BridgeError("x", code=code).http_status == MEANINGS[code].http_status


def test_a_code_not_on_the_list_fails_at_the_raise():
    with pytest.raises(ValueError):
        BridgeError("x", code="made_up_code")


def is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def string_codes(tree: ast.AST) -> list[int]:
    """Lines where a code is written as a bare string: a `code=` keyword or a `"code":` dict entry."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "code" and is_text(node.value):
            lines.append(node.value.lineno)
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                named = isinstance(key, ast.Constant) and key.value == "code"
                if named and is_text(value):
                    lines.append(value.lineno)
    return lines


def test_no_production_code_spells_an_error_code_as_a_string():
    """Every raise and every error body names an ErrorCode member, so the list cannot drift from the code."""
    found = {}
    for path in sorted((REPO / "jobs").rglob("*.py")):
        if "migrations" in path.parts or path == Path(errors.__file__):
            continue
        lines = string_codes(ast.parse(path.read_text(), filename=str(path)))
        if lines:
            found[str(path.relative_to(REPO))] = lines
    assert found == {}


def test_the_checker_sees_a_string_code():
    source = 'raise NotFound("x", code="no_such_task")\nbody = {"code": "oops"}\nclose(code=1011)'
    assert sorted(string_codes(ast.parse(source))) == [1, 2]


def test_the_openapi_schema_lists_every_code():
    from jobs.web.api import api

    schema = api.get_openapi_schema()
    schemas = schema["components"]["schemas"]
    assert schemas["ErrorOut"]["properties"]["code"]["$ref"] == "#/components/schemas/ErrorCode"
    assert schemas["ErrorCode"]["enum"] == [code.value for code in ErrorCode]


@pytest.mark.parametrize("status", range(400, 600))
def test_an_error_django_answers_in_another_shape_under_v1_becomes_json_with_a_listed_code(status):
    """Whatever status Django or django-ninja answered with, the JSON body names a code on the list (a reason phrase
    such as "Forbidden" is not one, and must not fail the answer)."""
    from django.http import HttpResponse
    from django.test import RequestFactory

    from jobs.web.middleware import as_json_error

    request = RequestFactory().get("/v1/tasks")
    answer = as_json_error(request, HttpResponse("plain text", status=status, content_type="text/plain"))
    assert answer.status_code == status and answer["Content-Type"] == "application/json"
    assert json.loads(answer.content)["code"] in set(ErrorCode)
