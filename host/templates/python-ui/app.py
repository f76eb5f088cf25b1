"""`{{name}}`: a Gatehouse gadget with a face. It greets, lists the services
introduced to its chat with the tools each grants, and, when ISSUES is
introduced, reads the issues (a read: answered at once).

Its face is PAGE below, shown beside its chat (in the inbox of `gatehouse
serve`, and in MCP hosts): the page calls `services` and `issues`, each call
a turn of the person viewing the page, under the same rules as `run`.

Build: `sh build.sh` (componentize-py, world gadget-with-face; see README.md)
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.face import Page
from wit_world.imports import kernel


def describe(error) -> str:
    """One line for a refused call."""
    value = error.value
    if isinstance(error, kernel.CallError_UnknownKey):
        return f"unknown key {value.key}"
    if isinstance(error, kernel.CallError_NotGranted):
        return f"{value.tool} is not granted"
    return str(value)


class Run(exports.Run):
    def run(self, input: str) -> str:
        # Raising Err(text) returns the `err` case of result<string, string>.
        lines = [f"Hello from {{name}}. You said: {input.strip()!r}"]
        keys = kernel.env()
        if not keys:
            lines.append("Services introduced: none")
        try:
            for key in keys:
                tools = [tool.name for tool in kernel.open(key).tools()]
                lines.append(f"Service {key}: {', '.join(tools)}")
            if "ISSUES" in keys:
                outcome = kernel.open("ISSUES").call("listIssues", "{}")
                if isinstance(outcome, kernel.Outcome_Done):
                    lines.append(f"ISSUES answered: {outcome.value}")
                else:
                    lines.append(f"staged as #{outcome.value.action_id}")
        except Err as e:
            raise Err(describe(e.value))
        return "\n".join(lines)


# The page: one self-contained document (it can load nothing). The host
# puts the bridge that defines `gatehouse.call(name, args)` first in it.
PAGE = """{{page}}"""


def services() -> list:
    """[{"key": "ISSUES", "tools": ["listIssues", ...]}, ...]"""
    return [
        {"key": key, "tools": [tool.name for tool in kernel.open(key).tools()]}
        for key in kernel.env()
    ]


def issues() -> str:
    """What ISSUES' listIssues answers (JSON text: a read runs at once)."""
    outcome = kernel.open("ISSUES").call("listIssues", "{}")
    if not isinstance(outcome, kernel.Outcome_Done):
        raise Err(f"listIssues was staged as #{outcome.value.action_id} instead of answered as a read")
    return outcome.value


class Face(exports.Face):
    def show(self) -> Page:
        # Asked for outside any turn: it may not call the kernel.
        return Page(title="{{name}}", html=PAGE, functions=["services", "issues"])

    def call(self, name: str, args: str) -> str:
        # `args` is a JSON object (text); the answer is JSON text, and
        # raising Err(text) shows the text to the person.
        try:
            if name == "services":
                return json.dumps(services())
            if name == "issues":
                return issues()
        except Err as e:
            if isinstance(e.value, str):
                raise
            raise Err(describe(e.value))
        raise Err(f"{{name}}'s face has no function {name!r}")
