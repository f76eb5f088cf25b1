"""`triage-py`: the Rust `triage` gadget, in Python.

It reads the issues of the service introduced as `ISSUES`, files a triage
report and labels the first untriaged issue (both actions are staged for a
decision), and with `poll ID...` reports where its actions stand. It makes
the same kernel calls as the Rust gadget, so the service sees the same
requests.
"""

import json

from wit_world import exports
from wit_world.imports import kernel
from componentize_py_types import Err

KEY = "ISSUES"


class Run(exports.Run):
    def run(self, input: str) -> str:
        text = input.strip()
        if text.startswith("poll"):
            return poll(text[len("poll"):])
        return triage()


def one_line(text: str) -> str:
    return " ".join(text.split())


def describe(error) -> str:
    """One readable line for a refused or failed call."""

    def listed(items):
        return ", ".join(items) if items else "(none)"

    if isinstance(error, kernel.CallError_UnknownKey):
        text = f"unknown key {error.value.key}; introduced keys: {listed(error.value.known)}"
    elif isinstance(error, kernel.CallError_NotGranted):
        e = error.value
        text = f"tool {e.tool} is not granted for {e.key}; allowed: {listed(e.allowed)}"
    elif isinstance(error, kernel.CallError_InvalidArgs):
        text = f"invalid arguments: {error.value}"
    elif isinstance(error, kernel.CallError_Refused):
        text = f"refused: {error.value}"
    else:
        text = f"service error: {error.value}"
    return one_line(text)


def compact(text: str) -> str:
    """JSON on one line (text that is not JSON is flattened instead)."""
    try:
        return dumps(json.loads(text))
    except ValueError:
        return one_line(text)


def dumps(value) -> str:
    # Sorted keys and no spaces: the same bytes serde_json writes.
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def issue_id(issue):
    value = issue.get("id") if isinstance(issue, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def labels(issue):
    value = issue.get("labels") if isinstance(issue, dict) else None
    if not isinstance(value, list):
        return []
    return [label for label in value if isinstance(label, str)]


def action(service, tool: str, args) -> str:
    """Calls an action and describes its outcome in one line."""
    try:
        outcome = service.call(tool, dumps(args))
    except Err as e:
        return f"err: {describe(e.value)}"
    if isinstance(outcome, kernel.Outcome_Pending):
        p = outcome.value
        return f"#{p.action_id} pending: {one_line(p.message)}"
    return f"done: {compact(outcome.value)}"


def triage() -> str:
    keys = kernel.env()
    if KEY not in keys:
        known = ", ".join(keys) if keys else "none"
        raise Err(
            f"no {KEY} service is introduced to this chat (introduced: {known}); "
            f"run `introduce CHAT GATEKEEPER --as {KEY}` first"
        )
    try:
        service = kernel.open(KEY)
    except Err as e:
        raise Err(describe(e.value))

    try:
        outcome = service.call("listIssues", "{}")
    except Err as e:
        raise Err(f"listIssues failed: {describe(e.value)}")
    if isinstance(outcome, kernel.Outcome_Pending):
        raise Err(
            f"listIssues was staged as action #{outcome.value.action_id} instead of "
            f"answered as a read: {one_line(outcome.value.message)}"
        )
    try:
        issues = json.loads(outcome.value)
    except ValueError as e:
        raise Err(f"listIssues answered invalid JSON: {e}")
    if not isinstance(issues, list):
        raise Err("listIssues did not answer a JSON list")

    report = [f"Read {len(issues)} issue{'' if len(issues) == 1 else 's'} from {KEY}."]

    body = ""
    for issue in issues:
        ident = issue_id(issue)
        title = issue.get("title") if isinstance(issue, dict) else None
        names = labels(issue)
        body += "- #{} {}{}\n".format(
            "?" if ident is None else ident,
            title if isinstance(title, str) else "",
            f" [{', '.join(names)}]" if names else "",
        )
    create = {
        "title": f"Triage report: {len(issues)} open issues",
        "body": body if body else "No open issues.\n",
    }
    report.append(f"createIssue: {action(service, 'createIssue', create)}")

    target = next((i for i in issues if "triaged" not in labels(i)), None)
    if target is None and issues:
        target = issues[0]
    if target is None:
        report.append("addLabel: skipped, there are no issues")
    elif issue_id(target) is None:
        report.append("addLabel: skipped, the issue has no numeric id")
    else:
        ident = issue_id(target)
        args = {"id": ident, "label": "triaged"}
        report.append(f"addLabel triaged to #{ident}: {action(service, 'addLabel', args)}")
    return "\n".join(report)


def poll(rest: str) -> str:
    ids = []
    for word in rest.replace(",", " ").split():
        try:
            ids.append(int(word.lstrip("#")))
        except ValueError:
            raise Err(f"not an action id: {word!r}; usage: poll ID [ID...]")
        if ids[-1] < 0:
            raise Err(f"not an action id: {word!r}; usage: poll ID [ID...]")
    if not ids:
        raise Err("usage: poll ID [ID...]")
    lines = []
    for ident in ids:
        try:
            status = kernel.action_result(ident)
        except Err as e:
            lines.append(f"#{ident} error: {describe(e.value)}")
            continue
        if isinstance(status, kernel.ActionStatus_Pending):
            lines.append(f"#{ident} pending")
        elif isinstance(status, kernel.ActionStatus_Rejected):
            lines.append(f"#{ident} rejected: {one_line(status.value)}")
        elif isinstance(status, kernel.ActionStatus_Expired):
            lines.append(f"#{ident} expired: {one_line(status.value)}")
        elif isinstance(status, kernel.ActionStatus_Failed):
            how = "retryable" if status.value.retryable else "not retryable"
            lines.append(f"#{ident} failed ({how}): {one_line(status.value.message)}")
        else:
            lines.append(f"#{ident} applied: {compact(status.value)}")
    return "\n".join(lines)
