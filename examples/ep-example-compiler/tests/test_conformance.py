"""The epoxy SDK conformance kit's API scope against this provider, as installed
(``pip install -e ".[test]"``: the kit finds the provider through its entry point)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROVIDER = "example_compiler"


def test_api_scope_passes() -> None:
    # strict: a load failure of this plugin is an error, not a provider quietly left out
    env = {**os.environ, "EPOXY_STRICT_PLUGINS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "epoxy_sdk.conformance", "--epoxy-provider", PROVIDER,
         "--epoxy-scope", "api", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, env=env, cwd=Path(__file__).parent, check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
