"""``epoxy providers --check`` as a user runs it, on the installed providers."""

from __future__ import annotations

import json
import subprocess
import sys


def test_installed_providers_pass_the_check():
    run = subprocess.run([sys.executable, "-m", "epoxy.cli.main", "providers", "--check", "--json"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(run.stdout)
    cpu = next(c for c in data["checks"] if c["provider"] == "cpu")
    assert data["ok"] and cpu == {"provider": "cpu", "device": "cpu:cpu:0", "status": "ok", "stage": "capability",
                                  "detail": "claims the Relu probe"}
    table = subprocess.run([sys.executable, "-m", "epoxy.cli.main", "providers", "--check", "cpu"],
                           capture_output=True, text=True, check=False)
    assert table.returncode == 0 and "all providers passed the check" in table.stdout
