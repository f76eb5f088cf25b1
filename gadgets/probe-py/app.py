"""`probe-py`: a test gadget that tries every way out a Python program has.

The sandbox test runs it to prove that a Python gadget gets no more
authority than a Rust one: no host file, no directory, no environment
variable, no socket. It answers one JSON object, one field per attempt;
a failed attempt is `"error: ..."`. The input may name `HOST:PORT` to
connect to (a real listening server, so a success would be visible).
"""

import json
import os

from wit_world import exports


def attempt(fn):
    try:
        return fn()
    except BaseException as e:  # the probe reports, it never fails
        return f"error: {type(e).__name__}: {e}"


def read_file():
    with open("/etc/passwd") as f:
        return f.read()


def read_environ_file():
    with open("/proc/self/environ", "rb") as f:
        return f.read().decode("utf-8", "replace")


def list_root():
    return sorted(os.listdir("/"))


def list_cwd():
    return sorted(os.listdir("."))


def connect(target):
    def go():
        import socket

        host, port = target.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=2)
        s.sendall(b"GET /issues HTTP/1.0\r\n\r\n")
        return s.recv(100).decode("utf-8", "replace")

    return go


def resolve():
    import socket

    return str(socket.getaddrinfo("localhost", 80))


class Run(exports.Run):
    def run(self, input: str) -> str:
        target = input.strip() or "127.0.0.1:80"
        found = {
            "file": attempt(read_file),
            "environ_file": attempt(read_environ_file),
            "dir": attempt(list_root),
            "cwd": attempt(list_cwd),
            "env": dict(os.environ),
            "getenv_home": attempt(lambda: os.getenv("HOME")),
            "socket": attempt(connect(target)),
            "resolve": attempt(resolve),
        }
        return json.dumps(found, sort_keys=True)
