"""Exact version matching and the FlashInfer add-on plan that setup_host.sh executes."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import pytest

from llmhost import config
from llmhost.setup import versions

# Requires-Dist lines as sglang 0.5.17's METADATA states them.
SGLANG_REQUIRES = [
    "aiohttp",
    "flash-attn-4>=4.0.0b18",
    "flashinfer_python[cu13]==0.6.15.post1",
    "openai==2.6.1",
    'av==16.1.0; sys_platform == "linux" and platform_machine == "aarch64"',
    "torch==2.11.0",
]


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("0.5.2", "0.5.21", False),
    ("0.5.21", "0.5.2", False),
    ("0.5.2", "0.5.2.0", True),
    ("0.6.15.post1", "0.6.15", False),
    ("0.6.15.post1", "0.6.15.post2", False),
    ("0.6.15.post1", "0.6.15-1", True),
    ("0.6.15.post1", "0.6.15_post_1", True),
    ("1.0rc1", "1.0RC1", True),
    ("1.0c1", "1.0rc1", True),
    ("1.0a1", "1.0b1", False),
    ("1.0.dev0", "1.0", False),
    ("1!1.0", "1.0", False),
    ("v2.11.0", "2.11.0", True),
    ("0.6.15.post1+cu130", "0.6.15.post1", False),
    ("0.6.15.post1+cu130", "0.6.15.post1+CU130", True),
])
def test_same_is_exact_pep440_equality(a, b, expected):
    assert versions.same(a, b) is expected


def test_same_agrees_with_packaging_on_every_pair():
    packaging_version = pytest.importorskip("packaging.version")
    samples = ["0.5.2", "0.5.21", "0.5.2.0", "0.6.15", "0.6.15.post1", "0.6.15.post1+cu130", "1.0rc1",
               "1.0.post0.dev1", "2!0.1", "0.6.15.post1+cu129"]
    for a in samples:
        for b in samples:
            assert versions.same(a, b) == (packaging_version.Version(a) == packaging_version.Version(b)), (a, b)


def test_sort_key_orders_like_packaging():
    packaging_version = pytest.importorskip("packaging.version")
    samples = ["0.6.13", "0.6.9", "0.6.13rc1", "0.6.13.post1", "0.6.13.dev0", "0.6.13a1.dev2", "0.6.13+cu130",
               "0.6.13+cu129", "0.6.13+7", "1!0.1", "0.6.13.0", "0.6.13.post1.dev1", "2.0b2", "2.0c1"]
    ours = sorted(samples, key=lambda v: versions.parse(v).sort_key())
    assert ours == sorted(samples, key=packaging_version.Version)


def test_newest_skips_what_is_not_a_version():
    assert versions.newest(["0.6.9", "0.6.13", "0.6.13rc1", "latest"]) == "0.6.13"
    assert versions.newest(["nightly"]) is None


def test_local_segment_can_be_ignored_but_public_part_still_counts():
    assert versions.same("0.6.15.post1+cu130", "0.6.15.post1", ignore_local=True)
    assert not versions.same("0.6.15+cu130", "0.6.15.post1", ignore_local=True)


def test_parse_normalises_and_rejects_garbage():
    assert str(versions.parse("1.0RC1.DEV0+CU130_x")) == "1.0rc1.dev0+cu130.x"
    assert versions.parse("0.6.15.post1+cu130").public == "0.6.15.post1"
    for bad in ("", "latest", "0.5.x", "1.0+"):
        with pytest.raises(versions.VersionError):
            versions.parse(bad)


def test_cuda_tag_and_canonical_names():
    assert versions.cuda_tag("13.0") == "cu130"
    assert versions.cuda_tag("12.9.1") == "cu129"
    with pytest.raises(versions.VersionError):
        versions.cuda_tag("thirteen")
    assert versions.canonical_name("FlashInfer_Python") == "flashinfer-python"


def test_pinned_version_reads_sglang_requirements_with_extras():
    assert versions.pinned_version(SGLANG_REQUIRES, "flashinfer-python") == "0.6.15.post1"
    assert versions.pinned_version(SGLANG_REQUIRES, "torch") == "2.11.0"
    assert versions.pinned_version(SGLANG_REQUIRES, "flash-attn-4") is None  # a range, not a pin
    assert versions.pinned_version(SGLANG_REQUIRES, "numpy") is None


def lines(installed, cuda="13.0", pin="0.6.15.post1"):
    return [a.line() for a in versions.plan_flashinfer(installed, cuda, pin)]


def test_matching_addons_need_nothing():
    plan = lines({"flashinfer_python": "0.6.15.post1", "flashinfer-cubin": "0.6.15.post1",
                  "flashinfer-jit-cache": "0.6.15.post1+cu130"})
    assert [line.split()[0] for line in plan] == ["ok", "ok", "ok"]


def test_absent_addons_are_installed_at_the_base_version():
    plan = lines({"flashinfer-python": "0.6.15.post1"})
    assert plan[1:] == ["install flashinfer-cubin 0.6.15.post1", "install flashinfer-jit-cache 0.6.15.post1"]


def test_addon_indexes_follow_where_flashinfer_publishes_each_one():
    urls = config.load_values({})  # config.env's defaults
    assert versions.addon_indexes("flashinfer-cubin", urls, "cu130") == ["https://flashinfer.ai/whl",
                                                                         "https://pypi.org/simple"]
    assert versions.addon_indexes("flashinfer-jit-cache", urls, "cu130") == ["https://flashinfer.ai/whl/cu130"]
    mirror = {**urls, "FLASHINFER_INDEX_URL": "https://pypi.org/simple/"}  # a mirror serving both: asked once
    assert versions.addon_indexes("flashinfer-cubin", mirror, "cu129") == ["https://pypi.org/simple"]


@pytest.mark.parametrize(("findings", "wheelhouse", "expected"), [
    ([("missing", "A"), ("resolves", "B")], False, ("install", "B")),
    ([("resolves", "A"), ("resolves", "B")], False, ("install", "A")),  # the first index that has it wins
    ([("unreachable", "A"), ("missing", "B")], False, ("skip", "")),  # FlashInfer's index down: go on without
    ([("missing", "A"), ("missing", "B")], False, ("missing", "")),  # nobody publishes the pin: stop
    ([("fails", "A")], False, ("missing", "")),  # e.g. no wheel for this platform
    ([("missing", "DIR")], True, ("skip", "")),  # an offline wheelhouse without the add-on: go on without
])
def test_place_addon(findings, wheelhouse, expected):
    assert versions.place_addon(findings, wheelhouse=wheelhouse) == expected


def test_stale_or_wrong_cuda_addons_are_removed_then_reinstalled():
    plan = lines({"flashinfer-python": "0.6.15.post1", "flashinfer-cubin": "0.6.15",
                  "flashinfer-jit-cache": "0.6.15.post1+cu129", "flashinfer-bench": "0.1.2"})
    assert "remove flashinfer-cubin 0.6.15" in plan
    assert "remove flashinfer-jit-cache 0.6.15.post1+cu129" in plan
    assert plan[-1] == "install flashinfer-jit-cache 0.6.15.post1"
    # flashinfer-bench is a project with its own versions, not an add-on: never removed, never "mismatched"
    assert not any("flashinfer-bench" in line for line in plan)


def test_the_probe_reports_the_copy_python_imports_when_two_are_installed(tmp_path):
    """A PYTHONPATH overlay or a stale dist-info: the first on sys.path is what `import flashinfer` loads."""
    for folder, version in (("a", "0.6.15.post1"), ("b", "0.5.3")):
        info = tmp_path / folder / f"flashinfer_python-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flashinfer_python\nVersion: {version}\n")
    env_path = f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}"
    script = tmp_path / "py"
    script.write_text(f"#!/bin/sh\nPYTHONPATH={env_path} exec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    assert versions.probe(str(script))["packages"]["flashinfer-python"] == "0.6.15.post1"


def test_prefix_lookalike_versions_do_not_match():
    plan = lines({"flashinfer-python": "0.5.2", "flashinfer-cubin": "0.5.21"}, pin=None)
    assert "remove flashinfer-cubin 0.5.21" in plan
    assert "install flashinfer-cubin 0.5.2" in plan


def test_base_version_that_differs_from_sglang_pin_is_an_error():
    plan = lines({"flashinfer-python": "0.6.14"})
    assert plan[0] == "error flashinfer-python 0.6.14 sglang pins 0.6.15.post1"
    assert lines({})[0].startswith("error flashinfer-python - not installed")


def test_probe_lists_packages_of_another_interpreter():
    data = versions.probe(sys.executable)
    assert data["packages"]["pytest"]
    try:  # what this interpreter's sglang requires: nothing where it has none (the CPU suite's venv)
        want = importlib.metadata.requires("sglang") or []
    except importlib.metadata.PackageNotFoundError:
        want = []
    assert data["sglang_requires"] == want
    with pytest.raises(versions.VersionError, match="could not run"):
        versions.probe("/nonexistent/python")


def test_cli_same_exit_codes_and_version_of(repo):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "llmhost.setup.versions", *args], cwd=repo,
                              capture_output=True, text=True)
    assert cli("same", "0.5.2", "0.5.2.0").returncode == 0
    assert cli("same", "0.5.2", "0.5.21").returncode == 1
    bad = cli("same", "0.5.x", "0.5")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    out = cli("version-of", "--python", sys.executable, "pytest", "no-such-package").stdout.splitlines()
    assert out[0].startswith("pytest ") and out[1] == "no-such-package -"


SGLANG_SITE = {"sglang": ("0.5.17", ["flashinfer_python==0.6.15.post1", "torch==2.11.0",
                                     'pytest ; extra == "test"']),
               "flashinfer-python": ("0.6.15.post1", []), "torch": ("2.11.0", [])}


def test_the_probe_reads_sglangs_flashinfer_pin_from_its_metadata(site_python):
    """The pin setup installs add-ons against: from sglang's Requires-Dist, in the interpreter that runs SGLang."""
    data = versions.probe(site_python(SGLANG_SITE))
    assert "flashinfer_python==0.6.15.post1" in data["sglang_requires"]
    assert data["packages"]["sglang"] == "0.5.17" and data["packages"]["flashinfer-python"] == "0.6.15.post1"
    assert versions.pinned_version(data["sglang_requires"], versions.FLASHINFER_BASE) == "0.6.15.post1"


def test_the_probe_imports_torch_only_when_asked_for_its_cuda(tmp_path):
    """Importing torch takes seconds; only the FlashInfer plan needs its CUDA (provenance reads the metadata)."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\n__version__ = '2.11.0'\n"
        "import types\nversion = types.SimpleNamespace(cuda='13.0')\n")
    info = site / "torch-2.11.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n")
    script = tmp_path / "py"
    script.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    data = versions.probe(str(script))
    assert data["packages"]["torch"] == "2.11.0" and data["torch_cuda"] is None
    assert not (tmp_path / "imported").exists()
    assert versions.probe(str(script), torch_cuda=True)["torch_cuda"] == "13.0" and (tmp_path / "imported").exists()
