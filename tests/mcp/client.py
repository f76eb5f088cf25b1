"""An MCP client for the end-to-end tests and the benchmark, built with the
official Python SDK's client (`mcp`, pinned in
tools/langs/requirements-tests.txt). It drives `gatehouse mcp serve` (or
any MCP server) the way an agent would; this file only turns JSON steps
into SDK calls and SDK results into JSON.

Usage: client.py CONNECT
  CONNECT is a JSON object naming one server:
    {"stdio": {"command": PATH, "args": [...], "env": {...}, "stderr": PATH}}
    {"http": {"url": URL, "token": TOKEN-or-null, "ca": PEM-PATH-or-absent}}
      ("ca": the only authority an https server is checked against)
  plus, optionally, "mode": "auto" (the SDK's default) or "legacy".

Then one JSON step per line on stdin, one JSON answer per line on stdout:
  {"list": true}                      -> {"tools": [Tool, ...]}
  {"call": NAME, "arguments": {...}}  -> {"result": CallToolResult}
  {"resources": true}                 -> {"resources": [Resource, ...]}
  {"read": URI}                       -> {"result": ReadResourceResult}
  {"bench": {"direct": CONNECT, "gated_call": {"call": ...},
             "direct_call": {"call": ...}, "rounds": R, "calls": N}}
      -> {"gated": [seconds per call, one per round],
          "direct": [...]}: N calls through this connection, then N
          through a second connection to the direct server, alternated
          for R rounds
  A step that raises answers {"error": "ExceptionType: message"}.
If the connection itself fails, one line {"error": ...} is printed and the
script exits with status 1. Results are the SDK's models dumped by alias.
"""

import asyncio
import json
import ssl
import sys
import time

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def transport(connect, stack_files):
    if "stdio" in connect:
        s = connect["stdio"]
        params = StdioServerParameters(command=s["command"], args=s.get("args", []), env=s.get("env"))
        errlog = open(s["stderr"], "a") if s.get("stderr") else sys.stderr
        stack_files.append(errlog)
        return stdio_client(params, errlog=errlog)
    h = connect["http"]
    headers = {"Authorization": f"Bearer {h['token']}"} if h.get("token") else {}
    verify = ssl.create_default_context(cafile=h["ca"]) if h.get("ca") else True
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0), verify=verify)
    return streamable_http_client(h["url"], http_client=http)


def client(connect, files):
    return Client(transport(connect, files), mode=connect.get("mode", "auto"), cache=None)


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def describe(e):
    # Task groups wrap the cause; the innermost says what happened.
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"


async def call(c, step):
    return await c.call_tool(step["call"], step.get("arguments") or {})


async def bench(c, spec, files):
    out = {"gated": [], "direct": []}
    async with client(spec["direct"], files) as direct:
        await direct.list_tools()
        await c.list_tools()
        for _ in range(spec["rounds"]):
            for name, conn, step in (
                ("gated", c, spec["gated_call"]),
                ("direct", direct, spec["direct_call"]),
            ):
                start = time.perf_counter()
                for _ in range(spec["calls"]):
                    r = await call(conn, step)
                    if r.is_error:
                        raise RuntimeError(f"{name} call failed: {dump(r)}")
                out[name].append((time.perf_counter() - start) / spec["calls"])
    return out


async def answer(c, step, files):
    if "list" in step:
        tools = await c.list_tools()
        return {"tools": [dump(t) for t in tools.tools]}
    if "call" in step:
        return {"result": dump(await call(c, step))}
    if "resources" in step:
        listed = await c.list_resources()
        return {"resources": [dump(r) for r in listed.resources]}
    if "read" in step:
        return {"result": dump(await c.read_resource(step["read"]))}
    if "bench" in step:
        return await bench(c, step["bench"], files)
    return {"error": f"unknown step {step!r}"}


def say(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def main():
    connect = json.loads(sys.argv[1])
    files = []
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        async with client(connect, files) as c:
            say({"connected": c.protocol_version})
            while line := await reader.readline():
                if not line.strip():
                    continue
                try:
                    say(await answer(c, json.loads(line), files))
                except Exception as e:  # a failed step is an answer, not the end
                    say({"error": describe(e)})
    except Exception as e:
        say({"error": describe(e)})
        sys.exit(1)
    finally:
        for f in files:
            if f is not sys.stderr:
                f.close()


asyncio.run(main())
