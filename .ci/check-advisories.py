#!/usr/bin/env python3
"""Fails when a crate in a Cargo.lock has an advisory in the project's snapshot
of the RustSec database (.ci/advisories/rustsec.json, refreshed by
.ci/refresh-advisories.py) that applies to its locked version: a
vulnerability whose patched releases the lock has not taken, on its line or
another. Informational advisories (unmaintained, unsound, notices) are listed
and do not fail; withdrawn ones are ignored. An advisory the project accepts is
named in .ci/advisories/allowed.toml with the reason, and is then listed too.

Usage: .ci/check-advisories.py [LOCKFILE…]   (default: Cargo.lock guests/Cargo.lock)
       .ci/check-advisories.py --self-test  (the version matching, on known cases)
Exit status: 0 when nothing applies, 1 when a vulnerability does, 2 on bad input.
"""

import json
import os
import re
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def version_tuple(text):
    """(major, minor, patch, pre) of a version; pre-releases sort before the release."""
    core, _, pre = text.strip().partition("-")
    core = core.split("+")[0]
    parts = [int(p) for p in core.split(".")] + [0, 0, 0]
    return (parts[0], parts[1], parts[2], 0 if pre else 1, pre)


def caret_upper(parts, count):
    """The exclusive upper bound of ^ for a version written with `count` parts."""
    major, minor, patch = parts
    if major > 0 or count == 1:
        return (major + 1, 0, 0, 0, "")
    if minor > 0 or count == 2:
        return (0, minor + 1, 0, 0, "")
    return (0, 0, patch + 1, 0, "")


def comparator_matches(comparator, version):
    match = re.fullmatch(r"\s*(>=|<=|>|<|=|\^|~)?\s*([0-9][0-9A-Za-z.+-]*)\s*", comparator)
    if not match:
        raise ValueError(f"cannot read the requirement '{comparator}'")
    op, text = match.group(1) or "^", match.group(2)
    written = text.split("-")[0].split("+")[0].split(".")
    bound = version_tuple(text)
    if op == ">=":
        return version >= bound
    if op == ">":
        return version > bound
    if op == "<=":
        return version <= bound
    if op == "<":
        return version < bound
    if op == "=":
        return version[:3] == bound[:3] and version[4] == bound[4]
    if op == "~":
        upper = (bound[0] + 1, 0, 0, 0, "") if len(written) == 1 else (bound[0], bound[1] + 1, 0, 0, "")
        return bound <= version < upper
    return bound <= version < caret_upper(bound[:3], len(written))


def requirement_matches(requirement, version):
    """A requirement is comparators joined by commas, all of which must hold."""
    return all(comparator_matches(c, version) for c in requirement.split(","))


def applies(advisory, version_text):
    if advisory.get("withdrawn"):
        return False
    version = version_tuple(version_text)
    for requirement in advisory.get("patched", []) + advisory.get("unaffected", []):
        if requirement_matches(requirement, version):
            return False
    return True


def locked_packages(path):
    with open(path, "rb") as f:
        lock = tomllib.load(f)
    for package in lock.get("package", []):
        if package.get("source", "").startswith("registry+"):
            yield package["name"], package["version"]


def self_test():
    """The requirement forms RustSec uses, on versions either side of them."""
    cases = [
        (">= 46.0.2, < 47.0.0", "46.0.2", True), (">= 46.0.2, < 47.0.0", "46.0.1", False),
        (">= 46.0.2, < 47.0.0", "47.0.0", False), ("^0.6.14", "0.6.20", True),
        ("^0.6.14", "0.7.0", False), ("^1.2", "1.9.0", True), ("^1.2", "2.0.0", False),
        ("~1.2.3", "1.2.9", True), ("~1.2.3", "1.3.0", False), ("< 0.2", "0.1.9", True),
        ("= 1.0.0", "1.0.0", True), ("> 1.0.0", "1.0.0-alpha", False),
        (">= 1.0.0", "1.0.0-rc.1", False), ("0.3", "0.3.7", True),
    ]
    wrong = [(r, v, want) for r, v, want in cases if requirement_matches(r, version_tuple(v)) != want]
    advisory = {"patched": [">= 48.0.9, < 49.0.0", ">= 49.0.2"], "unaffected": ["< 40.0.0"]}
    for version, want in [("48.0.8", True), ("48.0.9", False), ("49.0.1", True), ("39.1.0", False)]:
        if applies(advisory, version) != want:
            wrong.append((advisory["patched"], version, want))
    for case in wrong:
        print(f"check-advisories self-test: wrong answer for {case}", file=sys.stderr)
    return 1 if wrong else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    locks = sys.argv[1:] or [os.path.join(ROOT, "Cargo.lock"), os.path.join(ROOT, "guests", "Cargo.lock")]
    try:
        with open(os.path.join(ROOT, ".ci", "advisories", "rustsec.json"), encoding="utf-8") as f:
            snapshot = json.load(f)
        allowed_path = os.path.join(ROOT, ".ci", "advisories", "allowed.toml")
        allowed = {}
        if os.path.exists(allowed_path):
            with open(allowed_path, "rb") as f:
                allowed = {entry["id"]: entry["reason"] for entry in tomllib.load(f).get("allow", [])}
        by_crate = {}
        for advisory in snapshot["advisories"]:
            by_crate.setdefault(advisory["package"], []).append(advisory)
        packages = sorted({p for lock in locks if os.path.exists(lock) for p in locked_packages(lock)})
    except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as e:
        print(f"check-advisories: {e}", file=sys.stderr)
        return 2
    failing, noted = [], []
    for name, version in packages:
        for advisory in by_crate.get(name, []):
            try:
                if not applies(advisory, version):
                    continue
            except ValueError as e:
                print(f"check-advisories: {advisory['id']}: {e}", file=sys.stderr)
                return 2
            patched = " | ".join(advisory["patched"]) or "no patched release"
            line = f"{name} {version}: {advisory['id']} ({advisory['date']}) {advisory['title']} [patched: {patched}]"
            if advisory["id"] in allowed:
                noted.append(f"{line} -- allowed: {allowed[advisory['id']]}")
            elif advisory.get("informational"):
                noted.append(f"{line} -- informational: {advisory['informational']}")
            else:
                failing.append(line)
    print(f"advisories: {len(packages)} locked crates checked against the snapshot of "
          f"{snapshot.get('commit', 'unknown')} ({len(snapshot['advisories'])} advisories)")
    for line in noted:
        print(f"  note: {line}")
    for line in failing:
        print(f"  VULNERABLE: {line}")
    if failing:
        print("take a patched release (cargo update -p CRATE --precise VERSION), or name the "
              "advisory in .ci/advisories/allowed.toml with the reason it does not apply")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
