"""The README's MCP table is what a planner's author reads first: it must list exactly the tools the MCP server
offers, each with every parameter it takes in the order it declares them, and say what `hermes_resume`'s "latest"
means today (Bridge's newest session in the cwd, else Hermes' own newest one there), as the server's instructions do."""

import asyncio
import re

from mcp import Client as McpClient

from jobs.mcp.server import INSTRUCTIONS, get_server
from tests.support import REPO

README_TABLE = re.compile(r"<!-- mcp-tools -->\n(.*?)\n<!-- /mcp-tools -->", re.S)
SIGNATURE = re.compile(r"`(\w+)\(([^)`]*)\)`")
HERMES_OWN_NEWEST = re.compile(r"Hermes' own\s+newest session", re.S)


def readme_table() -> str:
    found = README_TABLE.search((REPO / "README.md").read_text())
    assert found is not None, "README.md lost its <!-- mcp-tools --> table"
    return found.group(1)


def documented_tools(table: str) -> dict[str, list[str]]:
    """Each `name(parameter, …)` in the table's first column: the tool and its parameters as written."""
    tools: dict[str, list[str]] = {}
    for row in table.splitlines()[2:]:
        first_cell = row.split(" | ")[0]
        for name, parameters in SIGNATURE.findall(first_cell):
            assert name not in tools, f"{name} is listed twice"
            tools[name] = [p.strip() for p in parameters.split(",") if p.strip()]
    return tools


def served_tools() -> dict[str, list[str]]:
    """What the MCP server answers to tools/list: every tool and its parameters, in their declared order."""

    async def listed():
        async with McpClient(get_server()) as client:
            return (await client.list_tools()).tools

    return {tool.name: list(tool.input_schema.get("properties", {})) for tool in asyncio.run(listed())}


def test_the_readme_mcp_table_lists_exactly_the_served_tools_with_all_their_parameters():
    assert documented_tools(readme_table()) == served_tools()


def test_hermes_resumes_latest_is_described_with_its_fallback_in_the_readme_and_the_instructions():
    [resume_row] = [row for row in readme_table().splitlines() if row.startswith("| `hermes_resume(")]
    assert HERMES_OWN_NEWEST.search(resume_row), resume_row
    assert HERMES_OWN_NEWEST.search(INSTRUCTIONS), INSTRUCTIONS
