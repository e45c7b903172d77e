#!/usr/bin/env python3
"""Fails when two modules of a crate import each other, directly or through others.

Reads every package of the repository (each `Cargo.toml` with a `[package]`, the
guests' workspace included) and, in each crate's `src/`, every module file's
`crate::…`, `super::…` and `self::…` paths: in `use` lines (grouped ones are
expanded) and in expressions (`crate::engine::engine()`). A path names the
deepest module it reaches (a file `src/a/b.rs` or `src/a/b/mod.rs` is the
module `a::b`); what follows is an item of it.

A module and its own submodules are one unit: a child using what its parent
declares, or a parent re-exporting its children, is how Rust modules are meant
to be used and is no circle. Every other import is an edge between the two
modules (`serve::runs -> serve::store`, `model::replay -> agent::events`), and
any circle among them fails the check, printed with the lines that make it.

Imports inside `#[cfg(test)]` modules are not counted: a module's tests may use
any other module without being part of the graph the crate is built from.

Not seen: imports through a re-export at the crate root (`use crate::Thing` is
an import of the root, which holds everything), and modules reached only
through `#[path]`.

Usage:
    .ci/check-module-cycles.py [REPO]    check REPO (default: this repository)
    .ci/check-module-cycles.py --self-test
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

# Circles that are known and being removed, as (crate, frozenset of sibling
# modules). Only an exact match passes: a new circle, or one of these growing,
# still fails.
ALLOWED: set[tuple[str, frozenset[str]]] = set()

SKIP_DIRS = {"target", ".git", "node_modules"}
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH_RE = re.compile(rf"\b(?:crate|super|self)(?:::(?:{IDENT}))+")
USE_RE = re.compile(r"\buse\s+((?:crate|super|self)\b[^;]*);", re.S)
INLINE_MOD_RE = re.compile(rf"\bmod\s+({IDENT})\s*\{{")
CFG_TEST_RE = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([a-z]+\))?\s+)?$")


def strip_comments_and_strings(text: str) -> str:
    """The source with comments and string/char literals blanked (newlines kept,
    so line numbers stay right)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or (c == "'" and text.startswith("'\\", i)):
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use_tree(tree: str) -> list[str]:
    """`crate::a::{b, c::{d, e}}` -> [`crate::a::b`, `crate::a::c::d`, `crate::a::c::e`]."""
    tree = re.sub(r"\s+as\s+" + IDENT, "", tree)
    tree = re.sub(r"\s+", "", tree)
    depth = 0
    for i, c in enumerate(tree):
        if c == "{":
            if depth == 0:
                prefix = tree[:i]
                inner = tree[i + 1:tree.rfind("}")]
                parts, start, d = [], 0, 0
                for j, ch in enumerate(inner):
                    if ch == "{":
                        d += 1
                    elif ch == "}":
                        d -= 1
                    elif ch == "," and d == 0:
                        parts.append(inner[start:j])
                        start = j + 1
                parts.append(inner[start:])
                result = []
                for part in parts:
                    if not part:
                        continue
                    if part == "self":
                        result.append(prefix.rstrip(":"))
                    else:
                        result.extend(expand_use_tree(prefix + part))
                return result
            depth += 1
    return [tree]


def module_files(src: Path) -> dict[str, Path]:
    """Module path -> file, for the crate whose root is src/lib.rs (or main.rs)."""
    modules: dict[str, Path] = {}
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src)
        if rel.parts[0] == "bin":
            continue
        parts = list(rel.with_suffix("").parts)
        if parts in (["lib"], ["main"]):
            if parts == ["main"] and (src / "lib.rs").exists():
                continue
            modules[""] = path
            continue
        if parts[-1] == "mod":
            parts = parts[:-1]
        modules["::".join(parts)] = path
    return modules


def resolve(path: str, here: list[str], modules: dict[str, Path]) -> str | None:
    """The deepest module `path` (crate::…, super::…, self::…) reaches from `here`."""
    segments = path.split("::")
    if segments[0] == "crate":
        base, rest = [], segments[1:]
    else:
        base = list(here)
        rest = segments
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                if not base:
                    return None
                base.pop()
            rest = rest[1:]
    best = "::".join(base)
    current = list(base)
    for seg in rest:
        current.append(seg)
        name = "::".join(current)
        if name in modules:
            best = name
        else:
            break
    return best


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(module imported, line) for each `crate`/`super`/`self` path in `path`."""
    text = strip_comments_and_strings(path.read_text(encoding="utf-8"))
    here_file = module.split("::") if module else []
    # Inline modules (`mod tests { … }`): `super::` inside them is relative to them.
    spans = []  # (start, end, depth-names)
    for m in INLINE_MOD_RE.finditer(text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        is_test = CFG_TEST_RE.search(text[: m.start()]) is not None
        spans.append((m.start(), j, m.group(1), is_test))

    def here_at(offset: int) -> list[str]:
        inner = [name for start, end, name, _ in spans if start < offset < end]
        return here_file + inner

    def in_test(offset: int) -> bool:
        return any(test and start < offset < end for start, end, _, test in spans)

    found = []
    covered = []
    for m in USE_RE.finditer(text):
        covered.append((m.start(), m.end()))
        if in_test(m.start()):
            continue
        here = here_at(m.start())
        for item in expand_use_tree(m.group(1)):
            target = resolve(item, here, modules)
            if target is not None:
                found.append((target, text.count("\n", 0, m.start()) + 1))
    for m in PATH_RE.finditer(text):
        if any(a <= m.start() < b for a, b in covered) or in_test(m.start()):
            continue
        # `self::` alone in a method receiver (`self.x`) never matches; `Self::` is not a path here.
        target = resolve(m.group(0), here_at(m.start()), modules)
        if target is not None:
            found.append((target, text.count("\n", 0, m.start()) + 1))
    return found


def edge(a: str, b: str) -> tuple[str, str] | None:
    """The import `a -> b`, or None when one module is within the other."""
    pa = a.split("::") if a else []
    pb = b.split("::") if b else []
    k = 0
    while k < len(pa) and k < len(pb) and pa[k] == pb[k]:
        k += 1
    if k == len(pa) or k == len(pb):
        return None
    return a, b


def cycles(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = set(edges) | {b for a in edges for b in edges[a]}

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def crate_name(manifest: Path) -> str | None:
    text = manifest.read_text(encoding="utf-8")
    m = re.search(r'^\[package\][^\[]*?^name\s*=\s*"([^"]+)"', text, re.M | re.S)
    return m.group(1) if m else None


def check_crate(name: str, src: Path, root: Path) -> list[str]:
    """The circles of one crate not allowed, each as printable lines."""
    modules = module_files(src)
    edges: dict[str, dict[str, list[str]]] = {}
    for module, path in modules.items():
        for target, line in imports_of(module, path, modules):
            pair = edge(module, target)
            if pair is None:
                continue
            where = f"{path.relative_to(root)}:{line} ({module or 'crate'} -> {target})"
            edges.setdefault(pair[0], {}).setdefault(pair[1], []).append(where)
    problems = []
    for comp in cycles(edges):
        if (name, frozenset(comp)) in ALLOWED:
            print(f"allowed, and to be removed: {name}: {' <-> '.join(comp)}")
            continue
        lines = [f"{name}: an import circle between {', '.join(comp)}:"]
        members = set(comp)
        for a in comp:
            for b, wheres in sorted(edges.get(a, {}).items()):
                if b in members:
                    lines.append(f"  {a} -> {b}: " + "; ".join(wheres[:3]) + (" …" if len(wheres) > 3 else ""))
        problems.append("\n".join(lines))
    return problems


def check(root: Path) -> int:
    problems, crates = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        if "Cargo.toml" not in filenames:
            continue
        manifest = Path(dirpath) / "Cargo.toml"
        name = crate_name(manifest)
        src = Path(dirpath) / "src"
        if name is None or not ((src / "lib.rs").exists() or (src / "main.rs").exists()):
            continue
        crates += 1
        problems.extend(check_crate(name, src, root))
    for problem in problems:
        print(problem)
    print(f"{crates} crates read, {len(problems)} import circle(s)")
    return 1 if problems else 0


def self_test() -> int:
    """A made-up crate with a circle through three files, a parent/child pair (no
    circle) and an allowed circle; the check must find exactly the first."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = {
            "Cargo.toml": '[package]\nname = "made-up"\nversion = "0.1.0"\n',
            "src/lib.rs": "mod a;\nmod b;\nmod c;\nmod tree;\npub use a::A;\n",
            "src/a.rs": "use crate::b::B;\npub struct A;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
            "src/b.rs": "// use crate::a::A; in a comment is not an import\npub struct B(crate::c::C);\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n    fn t() { let _ = crate::tree::Root; }\n}\n",
            "src/c.rs": 'const S: &str = "crate::b::B";\nuse crate::{tree::{self, leaf::Leaf}, a::A};\npub struct C;\n',
            "src/tree/mod.rs": "pub mod leaf;\npub use leaf::Leaf;\npub struct Root;\n",
            "src/tree/leaf.rs": "use super::Root;\npub struct Leaf;\n",
        }
        for rel, content in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(content, encoding="utf-8")
        problems = check_crate("made-up", root / "src", root)
        expect_circle = len(problems) == 1 and "a, b, c" in problems[0]
        # b -> a only through a comment and its tests, c -> b only through a string:
        # none counts.
        modules = module_files(root / "src")
        b_imports = {t for t, _ in imports_of("b", root / "src/b.rs", modules)}
        c_imports = {t for t, _ in imports_of("c", root / "src/c.rs", modules)}
        ok = (
            expect_circle
            and b_imports == {"c"}
            and c_imports == {"tree", "tree::leaf", "a"}
            and expand_use_tree("crate::x::{y, z::{self, w as v}}") == ["crate::x::y", "crate::x::z", "crate::x::z::w"]
        )
        ALLOWED.add(("made-up", frozenset({"a", "b", "c"})))
        try:
            allowed_ok = check_crate("made-up", root / "src", root) == []
        finally:
            ALLOWED.discard(("made-up", frozenset({"a", "b", "c"})))
        if ok and allowed_ok:
            print("self-test passed: the made-up circle a -> b -> c -> a is found, the rest is not")
            return 0
        print("self-test FAILED:", problems, b_imports, c_imports, "allowed:", allowed_ok)
        return 1


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--self-test"]:
        return self_test()
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    return check(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
