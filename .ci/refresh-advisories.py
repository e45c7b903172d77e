#!/usr/bin/env python3
"""Refreshes .ci/advisories/rustsec.json, the project's snapshot of the RustSec
advisory database (https://github.com/rustsec/advisory-db), which
.ci/check-advisories.py reads: CI reaches no code host, so the snapshot is
kept in the repository and refreshed by hand.

Usage: .ci/refresh-advisories.py SOURCE
  SOURCE  a checkout of advisory-db, or a bare clone (a git directory): its
          crates/*/*.md files are read at HEAD.

Each advisory keeps what the check needs: its id, crate, date, title, the
version requirements it is patched and unaffected at, and whether it is
informational (unmaintained, unsound, notice) or withdrawn.
"""

import json
import os
import subprocess
import sys
import tomllib


def read_files(source):
    """(path, text) of every crates/*/*.md advisory at the source's HEAD."""
    if os.path.isdir(os.path.join(source, "crates")):
        for crate in sorted(os.listdir(os.path.join(source, "crates"))):
            folder = os.path.join(source, "crates", crate)
            for name in sorted(os.listdir(folder)):
                if name.endswith(".md"):
                    with open(os.path.join(folder, name), encoding="utf-8") as f:
                        yield f"crates/{crate}/{name}", f.read()
        return
    git = ["git", f"--git-dir={source}"]
    names = subprocess.run(git + ["ls-tree", "-r", "--name-only", "HEAD", "crates"],
                           check=True, capture_output=True, text=True).stdout.split()
    for path in names:
        if path.endswith(".md"):
            text = subprocess.run(git + ["show", f"HEAD:{path}"], check=True,
                                  capture_output=True, text=True).stdout
            yield path, text


def head_commit(source):
    git_dir = source if not os.path.isdir(os.path.join(source, "crates")) else os.path.join(source, ".git")
    result = subprocess.run(["git", f"--git-dir={git_dir}", "log", "-1", "--format=%H %cs"],
                            capture_output=True, text=True)
    return result.stdout.strip() or "unknown"


def parse(path, text):
    """The advisory's TOML front matter (between ```toml fences) and its title."""
    start = text.index("```toml") + len("```toml")
    end = text.index("```", start)
    front = tomllib.loads(text[start:end])
    title = next((line[2:].strip() for line in text[end:].splitlines() if line.startswith("# ")), "")
    advisory = front.get("advisory", {})
    versions = front.get("versions", {})
    return {
        "id": advisory["id"],
        "package": advisory["package"],
        "date": str(advisory.get("date", "")),
        "title": title,
        "informational": advisory.get("informational"),
        "withdrawn": str(advisory["withdrawn"]) if "withdrawn" in advisory else None,
        "patched": versions.get("patched", []),
        "unaffected": versions.get("unaffected", []),
    }


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    source = sys.argv[1]
    advisories = []
    for path, text in read_files(source):
        try:
            advisories.append(parse(path, text))
        except (ValueError, KeyError, tomllib.TOMLDecodeError) as e:
            print(f"skipped {path}: {e}", file=sys.stderr)
    advisories.sort(key=lambda a: (a["package"], a["id"]))
    out = os.path.join(os.path.dirname(__file__), "..", ".ci", "advisories", "rustsec.json")
    # One advisory a line, so a refresh reads as a diff of advisories.
    with open(out, "w", encoding="utf-8") as f:
        f.write('{"source": "https://github.com/rustsec/advisory-db",\n')
        f.write(f' "commit": {json.dumps(head_commit(source))},\n')
        f.write(' "advisories": [\n')
        f.write(",\n".join(json.dumps(a, sort_keys=True, ensure_ascii=False) for a in advisories))
        f.write("\n]}\n")
    print(f"{len(advisories)} advisories written to .ci/advisories/rustsec.json")


if __name__ == "__main__":
    main()
