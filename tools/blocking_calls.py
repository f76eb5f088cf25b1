#!/usr/bin/env python3
"""Store calls made in place on an async path: every synchronous `Store`
method waits on SQLite's file or on PostgreSQL's round trips, so an `async
fn` outside the store reaches one only inside a closure it hands to a
thread that may block (`Store::run`, `Kernel::blocking`,
`spawn_blocking`), or through the engine's async verbs. Prints each call
made in place, `file:line method`, and exits 1 when there is one.

A reading of the text, not of types: it sees `store().m(` and
`inner.store.m(` where `m` is a synchronous `pub` method of an
`impl Store` block under host/src/store/.

Usage: python3 tools/blocking_calls.py [host/src]"""
import os, re, sys

here = os.path.dirname(os.path.abspath(__file__))
root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "host", "src")
store_dir = os.path.join(root, "store")

def sources(d):
    for dirpath, _, files in os.walk(d):
        for f in sorted(files):
            if f.endswith(".rs"):
                yield os.path.join(dirpath, f)

def body_at(src, i):
    """The text from just after the `{` at `i - 1` to its matching `}`."""
    depth, j = 1, i
    while depth and j < len(src):
        if src[j] == "{": depth += 1
        elif src[j] == "}": depth -= 1
        j += 1
    return src[i:j - 1]

blocking, verbs = set(), set()
for path in sources(store_dir):
    src = open(path).read()
    for block in re.finditer(r"^impl Store \{", src, re.M):
        body = body_at(src, block.end())
        blocking |= set(re.findall(r"^    pub(?:\([^)]*\))? fn (\w+)", body, re.M))
        verbs |= set(re.findall(r"^    pub(?:\([^)]*\))? async fn (\w+)", body, re.M))
# What only reads this process's memory.
blocking -= verbs | {"key", "shared_url", "resolution_kept", "location", "still_on_disk"}

def handed_off(body, at):
    """Whether the call at `at` sits inside the arguments of a call to
    `run`, `blocking` or `spawn_blocking` (a closure run on a thread that
    may block)."""
    depth, k = 0, at
    while k > 0:
        k -= 1
        c = body[k]
        if c == ")": depth += 1
        elif c == "(":
            if depth == 0:
                if re.search(r"\b(run|blocking|spawn_blocking)\s*$", body[:k]): return True
            else: depth -= 1
    return False

found = []
for path in sources(root):
    if path.startswith(store_dir + os.sep): continue
    src = re.sub(r"//[^\n]*", lambda m: " " * len(m.group(0)), open(path).read())
    for fn in re.finditer(r"\basync fn \w+[^{;]*\{", src):
        body = body_at(src, fn.end())
        for call in re.finditer(r"(?:store\(\)|inner\.store)\s*\.\s*(\w+)\s*\(", body):
            if call.group(1) in blocking and not handed_off(body, call.start()):
                line = src[:fn.end() + call.start()].count("\n") + 1
                found.append(f"{os.path.relpath(path, root)}:{line} {call.group(1)}")
for f in found: print(f)
print(f"{len(found)} store call(s) made in place on an async path")
sys.exit(1 if found else 0)
