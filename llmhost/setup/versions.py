"""Exact package versions: PEP 440 parsing, comparison, and which FlashInfer packages to add or remove.

setup_host.sh uses this before and after the venv exists, so it is stdlib only. The rules it enforces:
  * "0.5.2" is not "0.5.21" (numeric release segments, never string prefixes), "0.5.2" is "0.5.2.0" (PEP 440
    pads releases with zeros), "0.6.15.post1" is neither "0.6.15" nor "0.6.15.post2".
  * flashinfer-cubin must equal flashinfer-python exactly; flashinfer-jit-cache carries the CUDA build as a local
    segment ("0.6.15.post1+cu130"), so its public version must equal flashinfer-python's and its local tag must
    name the CUDA that torch was built for. FlashInfer itself refuses to import with a mismatched add-on.
  * each add-on comes from the first of its indexes (ADDON_INDEXES) that has its version; when none has it, an
    index that did not answer means "go on without it" (FlashInfer JIT-compiles instead), otherwise it is an error.
    llmhost/setup/indexes.py asks the indexes; this module only decides.

    python3 -m llmhost.setup.versions same 0.5.2 0.5.21                    # exit 1: different
    python3 -m llmhost.setup.versions version-of --python PY sglang torch  # "sglang 0.5.17" lines ("-" = absent)
    python3 -m llmhost.setup.versions flashinfer-plan --python PY          # keep/remove/install lines for setup_host.sh

Writes nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Mapping

FLASHINFER_BASE = "flashinfer-python"
# Add-on packages with prebuilt kernels, and the config keys of the indexes that publish them, tried in order
# ("{cuda_tag}" in a URL becomes torch's CUDA tag, cu130). FlashInfer stopped uploading the cubin wheel to PyPI after
# 0.6.13 (its PR #3853) and serves it from its own index; PyPI still has the older versions. The JIT cache was never
# on PyPI: FlashInfer keeps one index per CUDA build.
ADDON_INDEXES: dict[str, tuple[str, ...]] = {
    "flashinfer-cubin": ("FLASHINFER_INDEX_URL", "PYPI_INDEX_URL"),
    "flashinfer-jit-cache": ("FLASHINFER_JIT_CACHE_INDEX_URL",),
}

# PEP 440 (Appendix B), with the normalisations of pre/post/dev spellings.
_PEP440 = re.compile(
    r"""^\s*v?
    (?:(?P<epoch>[0-9]+)!)?
    (?P<release>[0-9]+(?:\.[0-9]+)*)
    (?:[-_.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?:-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_PRE_ALIASES = {"alpha": "a", "beta": "b", "c": "rc", "pre": "rc", "preview": "rc"}


class VersionError(ValueError):
    """A string that is not a PEP 440 version."""


@dataclasses.dataclass(frozen=True, slots=True)
class Version:
    epoch: int
    release: tuple[int, ...]
    pre: tuple[str, int] | None
    post: int | None
    dev: int | None
    local: str  # normalised: lower case, '.'-separated; "" when absent

    @property
    def public(self) -> str:
        text = (f"{self.epoch}!" if self.epoch else "") + ".".join(map(str, self.release))
        if self.pre:
            text += f"{self.pre[0]}{self.pre[1]}"
        if self.post is not None:
            text += f".post{self.post}"
        if self.dev is not None:
            text += f".dev{self.dev}"
        return text

    def __str__(self) -> str:
        return self.public + (f"+{self.local}" if self.local else "")

    def public_key(self) -> tuple:
        """Identity of the public version: trailing zero release segments do not count (1.0 == 1.0.0)."""
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        return (self.epoch, tuple(release), self.pre, self.post, self.dev)

    def sort_key(self) -> tuple:
        """A key that sorts like PEP 440 (and packaging): 1.0.dev0 < 1.0a1 < 1.0 < 1.0+local < 1.0.post1."""
        epoch, release, pre, post, dev = self.public_key()
        if pre is None and post is None and dev is not None:
            pre_key: tuple = (0,)  # 1.0.dev0 sorts before 1.0a1
        else:
            pre_key = (2,) if pre is None else (1, *pre)
        local_key = tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in self.local.split(".") if p)
        return (epoch, release, pre_key, (0,) if post is None else (1, post), (1,) if dev is None else (0, dev),
                local_key)


def parse(text: str) -> Version:
    """Parse and normalise a PEP 440 version; VersionError names the bad string."""
    match = _PEP440.match(text or "")
    if not match:
        raise VersionError(f"{text!r} is not a PEP 440 version")
    g = match.groupdict()
    pre = None
    if g["pre_l"]:
        label = g["pre_l"].lower()
        pre = (_PRE_ALIASES.get(label, label), int(g["pre_n"] or 0))
    post = None
    if g["post_n1"] is not None:
        post = int(g["post_n1"])
    elif g["post_l"]:
        post = int(g["post_n2"] or 0)
    dev = int(g["dev_n"] or 0) if g["dev_l"] else None
    local = re.sub(r"[-_]", ".", g["local"].lower()) if g["local"] else ""
    return Version(int(g["epoch"] or 0), tuple(int(p) for p in g["release"].split(".")), pre, post, dev, local)


def same(a: str, b: str, *, ignore_local: bool = False) -> bool:
    """Exactly the same version (PEP 440 '==' without wildcards); local segments must match unless ignored."""
    va, vb = parse(a), parse(b)
    if va.public_key() != vb.public_key():
        return False
    return ignore_local or va.local == vb.local


def newest(texts: list[str]) -> str | None:
    """The highest PEP 440 version among `texts` (strings that are not versions are skipped); None when none is."""
    parsed = []
    for text in texts:
        try:
            parsed.append((parse(text).sort_key(), text))
        except VersionError:
            continue
    return max(parsed)[1] if parsed else None


def canonical_name(name: str) -> str:
    """PEP 503 project name: lower case, runs of -_. become '-' (flashinfer_python == flashinfer-python)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def cuda_tag(cuda_version: str) -> str:
    """'13.0' -> 'cu130': the tag FlashInfer's wheel index and jit-cache local versions use."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)*\s*", cuda_version or "")
    if not match:
        raise VersionError(f"{cuda_version!r} is not a CUDA version like 13.0")
    return f"cu{match.group(1)}{match.group(2)}"


def pinned_version(requires: list[str], name: str) -> str | None:
    """The exact '==' pin for `name` in Requires-Dist lines ('flashinfer_python[cu13]==0.6.15.post1')."""
    want = canonical_name(name)
    for line in requires:
        requirement = line.split(";", 1)[0]
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s,*]+)\s*$", requirement)
        if match and canonical_name(match.group(1)) == want:
            return match.group(2)
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    kind: str  # ok | remove | install | error
    name: str
    version: str  # installed version, or the wanted one for install/missing
    detail: str = ""  # error: the reason

    def line(self) -> str:
        return " ".join(part for part in (self.kind, self.name, self.version, self.detail) if part)


def plan_flashinfer(installed: Mapping[str, str], cuda_version: str, pin: str | None = None) -> list[Action]:
    """What to do so every flashinfer-* package matches flashinfer-python exactly.

    installed: canonical name -> version (every distribution in the environment). cuda_version: torch's CUDA
    ('13.0'). pin: the flashinfer-python version sglang requires, when known. Returns one Action per package:
    'remove' for an add-on (cubin, jit-cache) whose version differs (stale or for another CUDA), 'install' for
    each add-on that is absent or removed, 'ok' for matches, 'error' when flashinfer-python itself is wrong.
    Where an install comes from is place_addon's business.
    """
    packages = {canonical_name(k): v for k, v in installed.items()}
    base = packages.get(FLASHINFER_BASE)
    if base is None:
        return [Action("error", FLASHINFER_BASE, "-", "not installed (sglang pulls it in: install sglang first)")]
    actions: list[Action] = []
    if pin is not None and not same(base, pin):
        actions.append(Action("error", FLASHINFER_BASE, base, f"sglang pins {pin}"))
    else:
        actions.append(Action("ok", FLASHINFER_BASE, base, f"pinned by sglang ({pin})" if pin else ""))
    tag = cuda_tag(cuda_version)
    # only the add-ons versioned with flashinfer-python: other flashinfer-* projects (flashinfer-bench) have
    # their own version numbers and are none of our business
    for name in sorted(ADDON_INDEXES):
        have = packages.get(name)
        if have is not None and _addon_matches(name, have, base, tag):
            actions.append(Action("ok", name, have))
            continue
        if have is not None:
            actions.append(Action("remove", name, have))
        actions.append(Action("install", name, parse(base).public))
    return actions


def addon_indexes(name: str, urls: Mapping[str, str], tag: str) -> list[str]:
    """The index URLs to try for add-on `name`, in order, from config values (KEY -> URL); a repeat is dropped."""
    found: list[str] = []
    for key in ADDON_INDEXES[name]:
        url = urls[key].replace("{cuda_tag}", tag).rstrip("/")
        if url not in found:
            found.append(url)
    return found


def place_addon(findings: list[tuple[str, str]], *, wheelhouse: bool = False) -> tuple[str, str]:
    """Where an add-on comes from, given (state, location) per source in ADDON_INDEXES order.

    ('install', location) for the first source where it resolves; ('skip', '') when none resolves but one did not
    answer, or the offline wheelhouse lacks it: FlashInfer works without its add-ons, compiling kernels on first use;
    ('missing', '') when every source answered without it: a pin nobody publishes is a mistake to stop on.
    """
    for state, location in findings:
        if state == "resolves":
            return "install", location
    if wheelhouse or any(state == "unreachable" for state, _ in findings):
        return "skip", ""
    return "missing", ""


def _addon_matches(name: str, have: str, base: str, tag: str) -> bool:
    if name == "flashinfer-jit-cache":
        local = parse(have).local
        return same(have, base, ignore_local=True) and local in ("", tag)
    return same(have, base)


# Runs inside the target interpreter: every installed distribution, sglang's requirements, and (argument "cuda")
# torch's CUDA, which imports torch: seconds, so only the FlashInfer plan asks for it.
_PROBE = r"""
import json, re, sys, importlib.metadata as md
out = {"packages": {}, "sglang_requires": [], "torch_cuda": None}
for dist in md.distributions():  # sys.path order: the first copy of a name is the one Python imports
    name = dist.metadata["Name"]
    if name:
        out["packages"].setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
try:
    out["sglang_requires"] = md.requires("sglang") or []
except md.PackageNotFoundError:
    pass
# Packages put on PYTHONPATH without their dist-info still report a version through the module.
for dist, module in (("sglang", "sglang"), ("flashinfer-python", "flashinfer"), ("torch", "torch")):
    if not any(n.lower().replace("_", "-") == dist for n in out["packages"]):
        try:
            out["packages"][dist] = __import__(module).__version__
        except Exception:
            pass
if "cuda" in sys.argv[1:] and "torch" in {n.lower() for n in out["packages"]}:
    try:
        import torch
        out["torch_cuda"] = torch.version.cuda
    except Exception as exc:
        out["torch_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def probe(python: str, torch_cuda: bool = False) -> dict:
    """Installed packages (canonical names) and sglang's Requires-Dist of another interpreter; with `torch_cuda`,
    torch's CUDA too ("torch_cuda", None without one)."""
    try:
        proc = subprocess.run([python, "-c", _PROBE, *(["cuda"] if torch_cuda else [])], capture_output=True,
                              text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VersionError(f"could not run {python}: {exc}") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise VersionError(f"{python} failed to list its packages: {tail}")
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise VersionError(f"{python} printed no package list") from None
    data["packages"] = {canonical_name(k): v for k, v in data.get("packages", {}).items()}
    return data


def _cmd_same(args: argparse.Namespace) -> int:
    return 0 if same(args.a, args.b, ignore_local=args.ignore_local) else 1


def _cmd_version_of(args: argparse.Namespace) -> int:
    packages = probe(args.python)["packages"]
    for name in args.names:
        print(canonical_name(name), packages.get(canonical_name(name), "-"))
    return 0


def flashinfer_plan(python: str | None, cuda: str | None = None,
                    planned_base: str | None = None) -> tuple[str, list[Action]]:
    """(torch's CUDA, the plan) for the environment of `python`; or, before that environment exists, for a fresh
    one where sglang brings flashinfer-python `planned_base` and torch is built for CUDA `cuda`."""
    if planned_base is not None:
        if not cuda:
            raise VersionError("a planned flashinfer-python version needs the CUDA torch will be built for")
        return cuda, plan_flashinfer({FLASHINFER_BASE: planned_base}, cuda, planned_base)
    if python is None:
        raise VersionError("no interpreter to inspect and no planned flashinfer-python version")
    data = probe(python, torch_cuda=True)
    cuda = cuda or data.get("torch_cuda")
    if not cuda:
        raise VersionError(f"torch in {python} reports no CUDA ({data.get('torch_error', 'CPU-only build?')})")
    pin = pinned_version(data.get("sglang_requires", []), FLASHINFER_BASE)
    return cuda, plan_flashinfer(data["packages"], cuda, pin)


def _cmd_flashinfer_plan(args: argparse.Namespace) -> int:
    cuda, actions = flashinfer_plan(args.python, args.cuda)
    print("cuda", cuda_tag(cuda), cuda)
    for action in actions:
        print(action.line())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("same", help="exit 0 when two versions are exactly the same (PEP 440), else 1")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--ignore-local", action="store_true", help="ignore '+local' segments (default: compare them)")
    p.set_defaults(func=_cmd_same)
    p = sub.add_parser("version-of", help="print 'name version' ('-' when absent) for packages of --python")
    p.add_argument("--python", required=True, help="interpreter whose environment to inspect")
    p.add_argument("names", nargs="+")
    p.set_defaults(func=_cmd_version_of)
    p = sub.add_parser("flashinfer-plan", help="print ok/remove/install/error lines for the flashinfer-* packages")
    p.add_argument("--python", required=True, help="interpreter whose environment to inspect")
    p.add_argument("--cuda", help="CUDA version for the jit-cache tag (default: torch.version.cuda of --python)")
    p.set_defaults(func=_cmd_flashinfer_plan)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except VersionError as exc:
        print(f"versions: {exc}", file=sys.stderr)
        return 2 if args.command == "same" else 1


if __name__ == "__main__":
    raise SystemExit(main())
