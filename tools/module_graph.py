#!/usr/bin/env python3
"""The host library's module graph: for each top-level module of host/src, the
other top-level modules it names in non-test code (test-only files and items
skipped; `crate::x`, `use crate::{x, ..}`,
`super::x` from a top-level file, the re-exports of lib.rs, the console's print
macros), then any cycle among them, and any cycle among the files of a
folder module (`store/`, `web/`, ...). Exits 1 when there is a cycle.

Usage: python3 tools/module_graph.py [host/src]"""
import os, re, sys
here = os.path.dirname(os.path.abspath(__file__))
root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "host", "src")
mods = set()
for f in os.listdir(root):
    if f.endswith(".rs") and f not in ("lib.rs", "main.rs"): mods.add(f[:-3])
    elif os.path.isdir(os.path.join(root, f)): mods.add(f)

def strip_tests(src):
    # drop `#[cfg(test)] mod x { ... }` blocks and `#[cfg(test)]` single items, and comments
    out, i = [], 0
    src = re.sub(r"//[^\n]*", "", src)
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*", src[i:])
        if not m: out.append(src[i:]); break
        s = i + m.start(); out.append(src[i:s]); j = i + m.end()
        # skip the item: up to matching brace or semicolon
        depth = 0
        while j < len(src):
            c = src[j]
            if c == "{": depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0: j += 1; break
            elif c == ";" and depth == 0: j += 1; break
            j += 1
        i = j
    return "".join(out)

def names(src):
    found = set()
    for m in re.finditer(r"\bcrate::(\{[^}]*\}|\w+)", src):
        g = m.group(1)
        if g.startswith("{"):
            for part in re.split(r"[,\s]+", g[1:-1]):
                p = part.split("::")[0].strip()
                if p: found.add(p)
        else: found.add(g)
    return found

# lib.rs re-exports: crate::Kernel names the kernel module, and so on
REEXPORTS = {}
for m in re.finditer(r"pub use (\w+)::(?:\w+::)*(\w+);", open(os.path.join(root, "lib.rs")).read()):
    REEXPORTS[m.group(2)] = m.group(1)
graph = {m: set() for m in mods}

def test_only(dirpath):
    # files of modules their parent declares under `#[cfg(test)]`
    parent = os.path.join(dirpath, "mod.rs")
    if not os.path.exists(parent):
        parent = dirpath + ".rs"
    if not os.path.exists(parent): return set()
    src = open(parent).read()
    return {m.group(1) + ".rs" for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([\w:]+\))?\s+)?mod\s+(\w+)\s*;", src)}

for dirpath, _, files in os.walk(root):
    skipped = test_only(dirpath)
    for f in files:
        if not f.endswith(".rs") or f in skipped: continue
        path = os.path.join(dirpath, f)
        rel = os.path.relpath(path, root)
        parts = rel.split(os.sep)
        top = parts[0][:-3] if len(parts) == 1 else parts[0]
        if top in ("lib", "main") or (len(parts) > 1 and parts[-1] == "tests.rs"): continue
        src = strip_tests(open(path).read())
        used = names(src)
        # super:: from a top-level file names lib's items (a module);
        if len(parts) == 1:
            for m in re.finditer(r"\bsuper::(\w+)", src): used.add(m.group(1))
        used = {REEXPORTS.get(u, u) for u in used}
        if top != "console" and re.search(r"\b(outln|out|errln|err)!\(", src): used.add("console")
        for u in used:
            if u in mods and u != top: graph[top].add(u)
        # macros from console (`#[macro_use]`) count as naming console

for m in sorted(graph): print(f"{m} -> {', '.join(sorted(graph[m])) or '(none)'}")
def cycles(graph):
    """Strongly connected groups of more than one module (Tarjan)."""
    idx, low, on, st, sccs, n = {}, {}, set(), [], [], [0]
    def visit(v):
        idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
        for w in graph[v]:
            if w not in idx: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            c = []
            while True:
                w = st.pop(); on.discard(w); c.append(w)
                if w == v: break
            if len(c) > 1: sccs.append(sorted(c))
    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in idx: visit(v)
    return sccs

def folder_graph(folder):
    """Inside a folder module: which sibling each file (or sub-folder, all
    its files together) names (`super::x` from the folder's own files and
    from a sub-folder's `mod.rs`, `super::super::x` from a sub-folder's
    other files, `crate::folder::x` from anywhere), test-only files and
    items skipped."""
    d = os.path.join(root, folder)
    skipped = test_only(d)
    sibs = {f[:-3] for f in os.listdir(d) if f.endswith(".rs") and f != "mod.rs" and f not in skipped}
    sibs |= {f for f in os.listdir(d) if os.path.isdir(os.path.join(d, f))}
    g = {m: set() for m in sibs}
    crate_path = "crate::" + folder.replace(os.sep, "::")
    def named(src, prefix):
        out = set()
        for x in re.finditer(r"\b(?:" + prefix + r")::(\{[^}]*\}|\w+)", src):
            grp = x.group(1)
            out |= set([q.split("::")[0].strip() for q in re.split(r"[,\s]+", grp[1:-1])] if grp.startswith("{") else [grp])
        return out
    for m in sibs:
        p = os.path.join(d, m + ".rs")
        if os.path.exists(p):
            used = named(strip_tests(open(p).read()), "super|" + crate_path)
        else:
            sub = os.path.join(d, m)
            sub_skipped = test_only(sub)
            used = set()
            for f in os.listdir(sub):
                if not f.endswith(".rs") or f in sub_skipped: continue
                src = strip_tests(open(os.path.join(sub, f)).read())
                up = "super" if f == "mod.rs" else "super::super"
                used |= named(src.replace("super::super::", "SUPER2::") if f != "mod.rs" else src,
                              ("SUPER2" if f != "mod.rs" else up) + "|" + crate_path)
        for q in used:
            if q in sibs and q != m: g[m].add(q)
    return g

def folders(base=""):
    """Every folder module, nested ones too (`store`, `store/sqlite`, ...)."""
    d = os.path.join(root, base)
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        if os.path.isdir(p) and os.path.exists(os.path.join(p, "mod.rs")):
            rel = os.path.join(base, f) if base else f
            yield rel
            yield from folders(rel)

found = []
sccs = cycles(graph)
print("cycles (strongly connected groups):", sccs if sccs else "none")
for c in sccs:
    cs = set(c)
    for a in c:
        for b in sorted(graph[a] & cs): print(f"  {a} -> {b}")
found += sccs
for folder in folders():
    g = folder_graph(folder)
    inner = cycles(g)
    print(f"cycles inside {folder}/:", inner if inner else "none")
    for c in inner:
        cs = set(c)
        for a in c:
            for b in sorted(g[a] & cs): print(f"  {folder}::{a} -> {folder}::{b}")
    found += inner
sys.exit(1 if found else 0)
