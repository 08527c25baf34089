"""Package indexes asked the way setup_host.sh will use them: does a requirement resolve there, and if not, why.

uv itself gives the verdict (`uv pip compile`: a full resolution for the target Python, nothing installed). When it
cannot resolve, one fetch of the project's PEP 503 page (8 s timeout) tells an index that does not answer
("unreachable") from one that answers without the wanted version ("missing", naming the newest it has); anything
else is uv's own reason ("fails": a dependency conflict, no wheel for this platform). The FlashInfer add-ons then go
where llmhost.setup.versions says (ADDON_INDEXES, place_addon). Stdlib only: setup runs this before the venv exists.

    python3 -m llmhost.setup.indexes check --uv UV --index https://pypi.org/simple --prerelease sglang==0.5.17
    python3 -m llmhost.setup.indexes flashinfer-plan --uv UV --python PY         # the plan, each install with its index
    python3 -m llmhost.setup.indexes flashinfer-plan --uv UV --planned-base 0.6.15.post1 --cuda 13.0   # before the venv

`check` prints "WHERE: STATE DETAIL", then "pin NAME VERSION" per resolved package; exit 0 only when it resolves.
Index URLs for the add-ons come from the configuration (PYPI_INDEX_URL, FLASHINFER_INDEX_URL,
FLASHINFER_JIT_CACHE_INDEX_URL). Installs nothing (uv keeps what it downloads in its cache).
"""
from __future__ import annotations

import argparse
import dataclasses
import html
import os
import platform
import re
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Literal

from llmhost import config
from llmhost.setup import versions

State = Literal["resolves", "missing", "unreachable", "fails"]
TARGET_PYTHON = "3.12"  # the venv setup builds
TARGET_GLIBC = "2_39"  # Ubuntu 24.04's glibc: sglang 0.5.17 ships manylinux_2_34 wheels only
PAGE_TIMEOUT_S = 8.0
# uv's defaults retry an unanswered host 3 times with back-off (~11 s); one retry is enough to tell "down".
UV_ENV = {"UV_HTTP_RETRIES": "1", "UV_HTTP_TIMEOUT": "20", "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_ANCHOR = re.compile(r"<a\s[^>]*>([^<]+)</a>", re.IGNORECASE)


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    location: str  # a PEP 503 index URL, or a directory of wheels (--wheelhouse)
    is_wheelhouse: bool = False

    def uv_args(self) -> list[str]:
        return ["--no-index", "--find-links", self.location] if self.is_wheelhouse else ["--index-url", self.location]


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    state: State
    source: Source
    detail: str  # after the state: "(2 packages)", "version 1.0 (newest there: 0.9)", "(Connection refused)"
    pins: tuple[tuple[str, str], ...] = ()  # resolves: (canonical name, version) of every package uv picked

    def text(self) -> str:
        """'URL: resolves (211 packages)', 'URL: missing version 1.0 (newest there: 0.9)', 'URL: unreachable (why)'."""
        return f"{self.source.location}: {self.state} {self.detail}".rstrip()


class Unreachable(Exception):
    """An index that gave no usable answer (DNS, refused, timeout, 5xx)."""


def target_args(python: str | None) -> list[str]:
    """uv's resolution target: an existing interpreter (the venv), else the Python and platform setup will build."""
    if python:
        return ["--python", python]
    args = ["--python-version", TARGET_PYTHON]
    machine = platform.machine()
    if machine in ("x86_64", "aarch64"):
        args += ["--python-platform", f"{machine}-manylinux_{TARGET_GLIBC}"]
    return args


def resolve(uv: str, requirement: str, source: Source, target: list[str], *, no_deps: bool = False,
            prerelease: bool = False) -> tuple[list[tuple[str, str]] | None, str]:
    """(pins, "") when uv resolves `requirement` from `source` alone, else (None, uv's last reason line)."""
    cmd = [uv, "pip", "compile", "-", "--no-header", "--no-annotate", *source.uv_args(), *target]
    cmd += ["--no-deps"] * no_deps + ["--prerelease=allow"] * prerelease
    try:
        proc = subprocess.run(cmd, input=requirement + "\n", capture_output=True, text=True, timeout=300,
                              env={**os.environ, **UV_ENV})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"uv did not run: {exc}"
    if proc.returncode == 0:
        return [(versions.canonical_name(m[1]), m[2]) for m in map(_PIN.match, proc.stdout.splitlines()) if m], ""
    return None, _last_reason(proc.stderr)


def _last_reason(stderr: str) -> str:
    """uv's innermost cause of its error, continuation lines joined (warnings and hints are not the failure)."""
    entries: list[str] = []
    in_error = False
    for line in filter(None, (raw.strip() for raw in stderr.splitlines())):
        head = re.match(r"^(error:|cause:|warning:|hint:|╰─▶)\s*(.*)", line)
        if head is None:
            if in_error and entries:
                entries[-1] += " " + line
        elif head[1] == "error:":
            entries, in_error = [head[2]], True
        elif head[1] in ("cause:", "╰─▶") and in_error:
            entries.append(head[2])
        else:
            in_error = False
    return entries[-1][:400] if entries else "uv failed without a message"


def listed_versions(index_url: str, project: str, timeout_s: float = PAGE_TIMEOUT_S) -> list[str] | None:
    """Versions of the files on the project's PEP 503 page; None when the index has no such project (404)."""
    url = f"{index_url.rstrip('/')}/{versions.canonical_name(project)}/"
    request = urllib.request.Request(url, headers={"Accept": "text/html"})  # PEP 503, not PEP 691 JSON
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            page = response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410):
            return None
        raise Unreachable(f"HTTP {exc.code} from {url}") from None
    except urllib.error.URLError as exc:
        raise Unreachable(str(exc.reason)) from None
    except (OSError, ValueError) as exc:  # timeouts, resets, a URL urllib cannot open
        raise Unreachable(str(exc) or type(exc).__name__) from None
    return [v for v in (_file_version(html.unescape(a).strip(), project) for a in _ANCHOR.findall(page)) if v]


def _file_version(filename: str, project: str) -> str | None:
    """'flashinfer_cubin-0.6.13-py3-none-any.whl' -> '0.6.13'; sdists 'name-1.0.tar.gz' too; else None."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return parts[1] if len(parts) >= 5 else None
    for ext in (".tar.gz", ".zip"):
        if filename.endswith(ext):
            stem = filename[: -len(ext)]
            name, _, version = stem.rpartition("-")
            return version if versions.canonical_name(name) == versions.canonical_name(project) else None
    return None


def check(uv: str, name: str, version: str, source: Source, target: list[str], *, no_deps: bool = False,
          prerelease: bool = False) -> Finding:
    """Does name==version resolve from `source` for `target`? The answer as a Finding (pins when it resolves)."""
    pins, reason = resolve(uv, f"{name}=={version}", source, target, no_deps=no_deps, prerelease=prerelease)
    if pins is not None and not any(pin == versions.canonical_name(name) for pin, _ in pins):
        pins, reason = None, f"uv's resolution does not name {name}"
    if pins is not None:
        summary = " ".join(pins[0]) if len(pins) == 1 else f"{len(pins)} packages"
        return Finding("resolves", source, f"({summary})", tuple(pins))
    if source.is_wheelhouse:
        return Finding("missing", source, f"({reason})")
    try:
        listed = listed_versions(source.location, name)
    except Unreachable as exc:
        return Finding("unreachable", source, f"({exc})")
    if listed is None:
        return Finding("missing", source, f"(no {name} project there)")
    if not any(_matches(v, version) for v in listed):
        return Finding("missing", source, f"version {version} (newest there: {versions.newest(listed) or 'none'})")
    return Finding("fails", source, f"({reason})")


def _matches(listed: str, wanted: str) -> bool:
    """PEP 440 '==' as an installer applies it: a wanted version without '+local' accepts any local build."""
    try:
        return versions.same(listed, wanted, ignore_local=not versions.parse(wanted).local)
    except versions.VersionError:
        return False


def addon_lines(uv: str, actions: list[versions.Action], tag: str, target: list[str], *,
                wheelhouse: str | None = None, urls: dict[str, str] | None = None) -> list[str]:
    """The plan's lines, each add-on install preceded by a 'sources' line (what every index said) and turned into
    'install NAME VERSION WHERE', 'skip NAME VERSION' or 'missing NAME VERSION' (versions.place_addon)."""
    urls = config.load_values() if urls is None else urls
    lines = []
    for action in actions:
        if action.kind != "install":
            lines.append(action.line())
            continue
        sources = ([Source(wheelhouse, is_wheelhouse=True)] if wheelhouse else
                   [Source(url) for url in versions.addon_indexes(action.name, urls, tag)])
        findings = [check(uv, action.name, action.version, s, target, no_deps=True) for s in sources]
        lines.append(f"sources {action.name} {action.version} from {'; '.join(f.text() for f in findings)}")
        kind, where = versions.place_addon([(f.state, f.source.location) for f in findings],
                                           wheelhouse=wheelhouse is not None)
        if kind == "skip":  # why: the indexes that did not answer, or the wheelhouse that lacks it
            where = (f"not in the wheelhouse {wheelhouse}" if wheelhouse else
                     "; ".join(f.text() for f in findings if f.state == "unreachable"))
        elif kind == "missing":
            where = "; ".join(f.text() for f in findings)
        lines.append(f"{kind} {action.name} {action.version} {where}")
    return lines


def _cmd_check(args: argparse.Namespace) -> int:
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)\s*", args.requirement)
    if not match:
        raise versions.VersionError(f"{args.requirement!r} is not NAME==VERSION")
    source = Source(args.wheelhouse, is_wheelhouse=True) if args.wheelhouse else Source(args.index)
    finding = check(args.uv, *match.groups(), source, target_args(args.python), no_deps=args.no_deps,
                    prerelease=args.prerelease)
    pins = dict(finding.pins)
    shown = ", ".join(f"{name} {pins[name]}" for name in args.show if name in pins)
    if shown:
        finding = dataclasses.replace(finding, detail=f"{finding.detail[:-1]}: {shown})")
    print(finding.text())
    for name, version in finding.pins:
        print("pin", versions.canonical_name(name), version)
    return 0 if finding.state == "resolves" else 1


def _cmd_flashinfer_plan(args: argparse.Namespace) -> int:
    cuda, actions = versions.flashinfer_plan(args.python, args.cuda, args.planned_base)
    tag = versions.cuda_tag(cuda)
    print("cuda", tag, cuda)
    for line in addon_lines(args.uv, actions, tag, target_args(args.python), wheelhouse=args.wheelhouse):
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="does NAME==VERSION resolve from one index (or wheelhouse)? exit 0 = yes")
    p.add_argument("requirement", help="NAME==VERSION")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--index", help="PEP 503 index URL")
    where.add_argument("--wheelhouse", help="directory of wheels (uv --no-index --find-links)")
    p.add_argument("--no-deps", action="store_true", help="resolve the package alone (default: with dependencies)")
    p.add_argument("--prerelease", action="store_true", help="allow pre-release dependencies (sglang needs them)")
    p.add_argument("--show", type=lambda text: [n for n in text.split(",") if n], default=[],
                   help="comma-separated packages whose resolved versions the verdict line names (default: none)")
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("flashinfer-plan", help="versions' flashinfer-plan, each add-on install with its source")
    p.add_argument("--planned-base", help="flashinfer-python version sglang will bring (before the venv exists)")
    p.add_argument("--cuda", help="CUDA torch is built for (default: torch.version.cuda of --python)")
    p.add_argument("--wheelhouse", help="the only source: a directory of wheels (offline install)")
    p.set_defaults(func=_cmd_flashinfer_plan)
    for p in sub.choices.values():
        p.add_argument("--uv", required=True, help="uv executable that resolves")
        p.add_argument("--python", help="interpreter to resolve for (default: Python 3.12 on this machine's arch)")
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (versions.VersionError, config.ConfigError) as exc:
        print(f"indexes: {exc}", file=sys.stderr)
        return 2 if args.command == "check" and isinstance(exc, versions.VersionError) else 1


if __name__ == "__main__":
    raise SystemExit(main())
