"""launch_server's argv, rebuilt from the captured `--help` of SGLang 0.5.17 (tests/captures/launch_server_help.txt).

Every option listed there is accepted with its arity (flag, one value, ?, *, +, --x/--no-x) and choices; anything else
fails like argparse ("unrecognized arguments", exit 2). `--config FILE.yaml` is merged the way sglang's
ConfigArgumentMerger does it: each `key: value` becomes `--key value` placed before the command-line arguments (so the
command line wins); `true` adds a flag, `false` drops it; lists expand. Keys are option names without the leading
dashes (`api-key: ...`). PyYAML is used when importable, else a `key: value` / `- item` subset parser.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

CAPTURES = Path(__file__).resolve().parents[3] / "captures"
HELP_FILE = CAPTURES / "launch_server_help.txt"
PROG = "sglang serve"


def help_text() -> str:
    """The captured help, from the `usage:` line on (the capture starts with a deprecation warning)."""
    text = HELP_FILE.read_text()
    return text[text.index("usage: "):]


def option_table(text: str) -> list[dict]:
    """One entry per option: flags, dest, nargs (0, None, '?', '*', '+', 'bool'), choices, required."""
    usage, _, options = text.partition("\noptions:\n")
    usage = " ".join(usage.split())
    table = []
    for line in options.splitlines():
        if not re.match(r"^  -", line):
            continue
        header = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        alts = re.split(r", (?=-)", header)
        flags = [alt.split(" ", 1)[0] for alt in alts]
        if "--help" in flags:
            continue
        spec = alts[0].split(" ", 1)[1] if " " in alts[0] else ""
        table.append({
            "flags": flags,
            "dest": flags[0].lstrip("-").replace("-", "_"),
            "nargs": _arity(spec, flags),
            "choices": _choices(spec),
            "required": flags[0] in usage and f"[{flags[0]}" not in usage,
        })
    return table


def _arity(spec: str, flags: list[str]) -> object:
    if not spec:
        return "bool" if any(f.startswith("--no-") for f in flags[1:]) else 0
    if re.fullmatch(r"\[\S+\]", spec):
        return "?"
    if re.fullmatch(r"\[\S+ \.\.\.\]", spec):
        return "*"
    if re.fullmatch(r"\S+ \[\S+ \.\.\.\]", spec):
        return "+"
    return None


def _choices(spec: str) -> list[str] | None:
    match = re.match(r"\[?\{([^}]*)\}", spec)
    return match.group(1).split(",") if match else None


class _HelpAction(argparse.Action):
    def __init__(self, option_strings, dest, help_text=None, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show help and exit")
        self.text = help_text

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(self.text or help_text())
        parser.exit(0)


def build_parser(text: str | None = None, prog: str = PROG) -> argparse.ArgumentParser:
    """A parser taking exactly the options of a captured --help (launch_server's unless `text` is another's)."""
    parser = argparse.ArgumentParser(prog=prog, add_help=False)
    parser.add_argument("-h", "--help", action=_HelpAction, help_text=text)
    for opt in option_table(text or help_text()):
        kwargs: dict = {"dest": opt["dest"], "default": None}
        if opt["nargs"] == 0:
            kwargs.update(action="store_true", default=False)
        elif opt["nargs"] == "bool":
            kwargs.update(action=argparse.BooleanOptionalAction)
        else:
            kwargs.update(nargs=opt["nargs"], choices=opt["choices"], required=opt["required"])
        parser.add_argument(*opt["flags"], **kwargs)
    return parser


def _yaml_load(text: str) -> dict:
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        return _simple_yaml(text)
    data = yaml.safe_load(text)
    return data or {}


def _scalar(raw: str) -> object:
    raw = raw.strip()
    if raw[:1] in "'\"" and raw[-1:] == raw[:1] and len(raw) >= 2:
        return raw[1:-1]
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "~", ""):
        return None
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def _simple_yaml(text: str) -> dict:
    """`key: value` lines and `- item` list entries under a `key:` line; comments and blanks skipped."""
    data: dict = {}
    last = None
    for line in text.splitlines():
        stripped = line.split(" #", 1)[0].strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("- ") and last is not None:
            data[last] = (data[last] or []) + [_scalar(stripped[2:])]
            continue
        key, sep, value = stripped.partition(":")
        if not sep:
            raise ValueError(f"Config file line is not `key: value`: {stripped!r}")
        last = key.strip()
        data[last] = _scalar(value) if value.strip() else None
    return data


def merge_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """sglang's ConfigArgumentMerger: config entries first, then argv minus `--config FILE`."""
    indices = [i for i, arg in enumerate(argv) if arg == "--config"]
    if not indices:
        return argv
    if len(indices) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    at = indices[0]
    if at == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    path = Path(argv[at + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"Config file must be YAML format, got: {path.suffix}")
    if not path.exists():
        raise ValueError(f"Config file not found: {path}")
    data = _yaml_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError("Config file must contain a dictionary at root level")
    store_true = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
    merged: list[str] = []
    for key, value in data.items():
        if isinstance(value, bool):
            if key.replace("-", "_") not in store_true:
                merged += [f"--{key}", str(value).lower()]
            elif value:
                merged.append(f"--{key}")
        elif isinstance(value, list):
            if value:
                merged += [f"--{key}", *map(str, value)]
        elif isinstance(value, dict):
            merged += [f"--{key}", json.dumps(value)]
        else:
            merged += [f"--{key}", str(value)]
    return merged + argv[:at] + argv[at + 2:]


def parse(argv: list[str]) -> dict:
    """argv -> {dest: value-as-given}; argparse exits 2 on bad input, like the real server."""
    parser = build_parser()
    if "--config" in argv:
        argv = merge_config(parser, argv)
    return vars(parser.parse_args(argv))
