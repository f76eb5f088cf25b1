"""`{{name}}`: a Gatehouse gadget. It greets, lists the services introduced
to its chat with the tools each grants, and, when ISSUES is introduced,
reads the issues (a read: answered at once).

Build: `sh build.sh` (componentize-py; see README.md)
"""

from componentize_py_types import Err
from wit_world import exports
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
