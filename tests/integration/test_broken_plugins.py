"""A broken installed plugin is listed as failed by ``epoxy providers``; sessions still work."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

BROKEN_MODULES = {
    "epoxy_ep_broken_import": "raise ImportError('libvendor.so: cannot open shared object file')\n",
    "epoxy_ep_broken_factory": (
        "from epoxy.hookspecs import hookimpl\n"
        "@hookimpl\n"
        "def epoxy_register_providers(register):\n"
        "    raise RuntimeError('factory exploded')\n"
    ),
    "epoxy_ep_old_sdk": (
        "from epoxy.hookspecs import hookimpl\n"
        "class F:\n"
        "    name, vendor, version, sdk_api, priority = 'oldsdk', 'x', '0.1', 0, 5\n"
        "    def devices(self): return []\n"
        "    def create(self, d, o): return None\n"
        "@hookimpl\n"
        "def epoxy_register_providers(register):\n"
        "    register(F())\n"
    ),
    # loads and runs; only its description of its options is broken
    "epoxy_ep_broken_options": (
        "from epoxy.contract import SDK_API_VERSION, Device\n"
        "from epoxy.hookspecs import hookimpl\n"
        "from epoxy.kit import KernelProvider, KernelRegistry\n"
        "class F:\n"
        "    name, vendor, version, sdk_api, priority = 'brokenopts', 'x', '0.1', SDK_API_VERSION, 5\n"
        "    def devices(self): return [Device('brokenopts', 'cpu')]\n"
        "    def options(self): raise KeyError('no options table')\n"
        "    def create(self, d, o): return KernelProvider('brokenopts', d, KernelRegistry(), o)\n"
        "@hookimpl\n"
        "def epoxy_register_providers(register):\n"
        "    register(F())\n"
    ),
}


def install_fake_distribution(site: Path) -> None:
    """A dist-info with entry points in the epoxy.providers group, as pip would leave it."""
    dist = site / "epoxy_ep_broken-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: epoxy-ep-broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[epoxy.providers]\n" + "".join(f"{m.split('epoxy_ep_')[1]} = {m}\n" for m in BROKEN_MODULES)
    )
    for name, source in BROKEN_MODULES.items():
        (site / f"{name}.py").write_text(source)


def run_python(code: str, site: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(site), **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env)


def test_broken_plugins_are_listed_and_sessions_keep_working(tmp_path):
    install_fake_distribution(tmp_path)
    result = run_python("from epoxy.cli.main import main; main(['providers', '--json'])", tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    failed = {f["plugin"]: f for f in data["failed_plugins"]}
    assert "broken_import" in failed and "libvendor.so" in failed["broken_import"]["reason"]
    assert failed["broken_import"]["package"] == "epoxy-ep-broken"
    assert "factory exploded" in failed["broken_factory"]["reason"]
    assert "targets epoxy SDK API 0" in failed["old_sdk"]["reason"]
    providers = {p["name"]: p for p in data["providers"]}
    assert "cpu" in providers and "broken_options" not in failed
    assert providers["brokenopts"]["available"] and providers["brokenopts"]["options"] == {}
    assert "KeyError" in providers["brokenopts"]["options_error"]

    table = run_python("from epoxy.cli.main import main; main(['providers'])", tmp_path)
    assert "failed plugins:" in table.stdout and "libvendor.so" in table.stdout
    assert re.search(r"^brokenopts +\? \(see --options\)$", table.stdout, re.MULTILINE), table.stdout
    options = run_python(
        "from epoxy.cli.main import main; raise SystemExit(main(['providers', '--options']))", tmp_path
    )
    assert options.returncode == 0 and "options() failed: KeyError: 'no options table'" in options.stdout
    assert "conv_winograd" in options.stdout

    session = run_python(
        "import epoxy; from epoxy.demo import MODEL_PATH; import numpy as np;"
        "s = epoxy.InferenceSession(str(MODEL_PATH));"
        "print(s.run(None, {'pixels': np.zeros((1, 64), np.float32)})[0].shape, s.get_providers())",
        tmp_path,
    )
    assert session.returncode == 0, session.stderr
    assert "(1, 10) [" in session.stdout and "'cpu']" in session.stdout


def test_strict_mode_turns_plugin_failure_into_an_error(tmp_path):
    install_fake_distribution(tmp_path)
    result = run_python("import epoxy; print(epoxy.get_all_providers())", tmp_path, EPOXY_STRICT_PLUGINS="1")
    assert result.returncode != 0
    assert "PluginLoadError" in result.stderr and "broken_factory" in result.stderr or "broken_import" in result.stderr


def test_allowlist_skips_other_plugins(tmp_path):
    install_fake_distribution(tmp_path)
    result = run_python("import epoxy; from epoxy.plugins import default_registry as r;"
                        "print(epoxy.get_all_providers(), len(r().failures))", tmp_path, EPOXY_PROVIDERS="cpu")
    assert result.stdout.strip() == "['cpu'] 0"
