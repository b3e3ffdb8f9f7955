"""Run the SDK conformance kit's API scope against this provider."""

import subprocess
import sys


def test_api_scope_passes():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "epoxy_sdk.conformance", "--epoxy-provider", "example",
         "--epoxy-scope", "api", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:]
