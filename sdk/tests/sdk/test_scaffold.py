"""``epoxy sdk new-provider``: the generated packages pass the conformance kit as written (in
process, and pip-installed into a throwaway venv), use only the public contract, and the
committed examples/ are exactly what the generator writes now."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: the layout test needs tomli there
    tomllib = None  # type: ignore[assignment]

from epoxy.cli.main import main
from epoxy_sdk.scaffold import ScaffoldError, new_provider, render, validate_name

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
#: committed folder -> (provider name, style): regenerate with
#: ``epoxy sdk new-provider NAME --STYLE --dir examples/FOLDER`` after changing the templates
COMMITTED = {"ep-example": ("example", "kernels"), "ep-example-compiler": ("example_compiler", "compiler")}
STYLES = ("kernels", "compiler")
PUBLIC_MODULES = {"epoxy.contract", "epoxy.hookspecs", "epoxy.kit", "epoxy.errors", "epoxy.testing"}
IGNORED = {"__pycache__", ".pytest_cache", "build", "dist", ".venv"}


def _files(root: Path) -> dict[str, str]:
    """relative path -> text of the files under ``root`` (caches and build output left out)."""
    found = {}
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if path.is_file() and not any(p in IGNORED or p.endswith(".egg-info") for p in parts) and path.suffix != ".pyc":
            found["/".join(parts)] = path.read_text(encoding="utf-8")
    return found


# -- names and folders --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["npu", "my_npu", "acme2", "x"])
def test_valid_names(name):
    assert validate_name(name) == name


@pytest.mark.parametrize(("name", "why"), [
    ("", "not valid"), ("My", "not valid"), ("my-npu", "not valid"), ("2npu", "not valid"), ("my__npu", "not valid"),
    ("npu_", "not valid"), ("n" * 41, "longer than"), ("core", "reserved"), ("copy", "reserved"), ("cpu", "reserved"),
    ("cuda", "reserved"), ("host", "reserved"), ("import", "reserved"),
])
def test_invalid_names_are_refused(name, why, tmp_path):
    with pytest.raises(ScaffoldError, match=why):
        new_provider(name, "kernels", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_refuses_a_non_empty_folder_and_leaves_nothing_behind(tmp_path):
    target = tmp_path / "pkg"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ScaffoldError, match="already exists"):
        new_provider("npu", "kernels", target)
    assert [p.name for p in tmp_path.iterdir()] == ["pkg"] and [p.name for p in target.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert new_provider("npu", "kernels", empty) == empty and (empty / "pyproject.toml").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "pkg"]  # no staging folder left


def test_unknown_style(tmp_path):
    with pytest.raises(ScaffoldError, match="unknown provider style 'jit'"):
        new_provider("npu", "jit", tmp_path / "x")


# -- what is generated ----------------------------------------------------------------------------
@pytest.mark.parametrize("style", STYLES)
def test_layout_like_the_in_house_providers(style):
    files = render("my_npu", style)
    package = "src/epoxy_ep_my_npu"
    assert set(files) == {"pyproject.toml", "README.md", "tests/test_conformance.py",
                          *(f"{package}/{m}.py" for m in ("__init__", "version", "factory", "options", "provider",
                                                          "plugin"))}
    toml = tomllib or pytest.importorskip("tomli")
    project = toml.loads(files["pyproject.toml"])["project"]
    assert project["name"] == "epoxy-ep-my-npu"
    assert project["entry-points"]["epoxy.providers"] == {"my_npu": "epoxy_ep_my_npu.plugin"}
    runtime = project["dependencies"]
    assert any(d.startswith("epoxy-core>=") for d in runtime) and not any("epoxy-sdk" in d for d in runtime)
    assert any(d.startswith("epoxy-sdk[conformance]") for d in project["optional-dependencies"]["test"])
    assert (
        'name = "my_npu"' in files[f"{package}/factory.py"] and "class MyNpuFactory" in files[f"{package}/factory.py"]
    )


def _epoxy_imports(source: str) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return {m for m in modules if m == "epoxy" or m.startswith(("epoxy.", "epoxy_sdk"))}


@pytest.mark.parametrize("style", STYLES)
def test_generated_code_uses_only_the_public_contract(style):
    used = set()
    for path, text in render("my_npu", style).items():
        if path.endswith(".py"):
            used |= _epoxy_imports(text)
    assert used and used <= PUBLIC_MODULES, sorted(used - PUBLIC_MODULES)


@pytest.mark.parametrize("folder", sorted(COMMITTED))
def test_committed_example_is_what_the_generator_writes(folder, tmp_path):
    committed = EXAMPLES / folder
    if not committed.is_dir():
        pytest.skip(f"{committed} is not here (an installed SDK outside the repository)")
    name, style = COMMITTED[folder]
    fresh = _files(new_provider(name, style, tmp_path / folder))
    now = _files(committed)
    regenerate = f"rm -rf examples/{folder} && epoxy sdk new-provider {name} --{style} --dir examples/{folder}"
    assert sorted(now) == sorted(fresh), f"files differ from the generator's; regenerate: {regenerate}"
    stale = [path for path in fresh if now[path] != fresh[path]]
    assert not stale, f"{stale} differ from the generator's output; regenerate: {regenerate}"


# -- the kit passes, in process ---------------------------------------------------------------------
#: what the kit may skip for a generated provider, and why
ALLOWED_SKIPS = ("declares no aliases", "no cpu fallback", "proposes no fused groups")


@pytest.mark.parametrize("style", STYLES)
def test_generated_package_passes_the_api_scope(pytester, tmp_path, style):
    name = f"gen_{style}"
    root = new_provider(name, style, tmp_path / name)
    pytester.makeconftest(f'''
import sys
sys.path.insert(0, {str(root / "src")!r})
from epoxy_ep_{name} import plugin
from epoxy.plugins import reset_default_registry
from epoxy.testing import registry_with

reset_default_registry(registry_with(plugin))
''')
    result = pytester.runpytest_inprocess(
        "--pyargs", "epoxy_sdk.conformance.test_api_scope", "--epoxy-provider", name, "-p", "no:cacheprovider", "-rs")
    outcomes, out = result.parseoutcomes(), result.stdout.str()
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert not outcomes.get("failed", 0) and not outcomes.get("errors", 0), out[-3000:]
    assert all(any(why in line for why in ALLOWED_SKIPS) for line in skipped), skipped
    assert outcomes.get("passed", 0) >= 13, out[-3000:]
    if style == "compiler":  # its groups were compiled and run, not skipped
        assert not any("fused groups" in line or "no chain" in line for line in skipped), skipped
    else:  # it runs the kit's whole model (MatMul too) without a fallback
        assert not any("no cpu fallback" in line for line in skipped), skipped


@pytest.mark.parametrize("style", STYLES)
def test_generated_options_restrict_what_it_takes(tmp_path, style):
    from epoxy import InferenceSession, SessionOptions
    from epoxy.errors import InvalidArgumentError
    from epoxy.testing import registry_with
    from epoxy_sdk.conformance.kit_models import chain_model

    name = f"opt_{style}"
    root = new_provider(name, style, tmp_path / name)
    sys.path.insert(0, str(root / "src"))
    try:
        from importlib import import_module

        plugin = import_module(f"epoxy_ep_{name}.plugin")
    finally:
        sys.path.remove(str(root / "src"))
    registry = registry_with(plugin)
    model = chain_model(["Relu", "Add"])
    session = InferenceSession(model, SessionOptions(disable_fallback=True), [(name, {"ops": "Relu,Add"})],
                               registry=registry)
    assert set(session.partition_report().summary()) == {name}
    with pytest.raises(Exception, match="no provider can run node 'add_1'"):
        InferenceSession(model, SessionOptions(disable_fallback=True), [(name, {"ops": "Relu"})], registry=registry)
    with pytest.raises(InvalidArgumentError, match=r"unknown options \['op'\]; known options: \['ops'\]"):
        InferenceSession(model, None, [(name, {"op": "Relu"})], registry=registry)


# -- the CLI ----------------------------------------------------------------------------------------
def test_cli_writes_a_package(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["sdk", "new-provider", "my_npu", "--compiler"]) == 0
    out = capsys.readouterr().out
    assert "pip install -e './ep-my-npu[test]'" in out and "epoxy providers --check my_npu" in out
    assert _files(tmp_path / "ep-my-npu") == render("my_npu", "compiler")
    assert main(["sdk", "new-provider", "my_npu"]) == 1  # the folder is there now
    assert "already exists" in capsys.readouterr().err
    assert main(["sdk", "new-provider", "copy", "--dir", "elsewhere"]) == 1
    assert "reserved" in capsys.readouterr().err and not (tmp_path / "elsewhere").exists()


# -- pip-installed into a throwaway venv ----------------------------------------------------------
def _uv() -> str | None:
    for candidate in (shutil.which("uv"), str(Path(sys.executable).with_name("uv"))):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _uv_install(uv: str, python: Path, *requirements: str) -> None:
    """Offline first (uv's cache: no network, ~4 s), then from the index."""
    failures = []
    for extra in (["--offline"], []):
        done = subprocess.run([uv, "pip", "install", "--quiet", "--python", str(python), *extra, *requirements],
                              capture_output=True, text=True, timeout=600, check=False)
        if done.returncode == 0:
            return
        failures.append(done.stderr[-2000:])
    raise AssertionError("uv pip install failed:\n" + "\n---\n".join(failures))


def test_installed_packages_pass_their_own_tests(tmp_path):
    """Both styles, installed from their folders with their declared dependencies only, pass
    the conformance test they ship (which runs the kit on the installed entry point). The
    kernel package is written by the venv's own ``epoxy sdk new-provider``: the SDK wheel
    carries its templates and the core's CLI finds it."""
    if not (REPO / "core" / "pyproject.toml").is_file():
        pytest.skip("needs the epoxy repository (core/ and sdk/ are installed from it)")
    uv = _uv()
    if uv is None:
        pytest.skip("uv is not installed: it builds the throwaway venv fast (pip install uv)")
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, timeout=120)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / ("python.exe" if os.name == "nt" else "python")
    _uv_install(uv, python, str(REPO / "core"), f"{REPO / 'sdk'}[conformance]")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EPOXY_", "PYTEST_", "VIRTUAL_ENV"))}
    kernels = tmp_path / "venv_kernels"
    made = subprocess.run([str(bin_dir / "epoxy"), "sdk", "new-provider", "venv_kernels", "--kernels", "--dir",
                           str(kernels)], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert made.returncode == 0, made.stdout + made.stderr
    assert _files(kernels) == render("venv_kernels", "kernels")
    roots = [kernels, new_provider("venv_compiler", "compiler", tmp_path / "venv_compiler")]
    _uv_install(uv, python, *(f"{root}[test]" for root in roots))
    result = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=importlib",
                             *(str(root / "tests") for root in roots)],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout, result.stdout[-2000:]
