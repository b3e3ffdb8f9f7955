"""Developer shortcut for ``epoxy-conformance`` (see ``epoxy_sdk.conformance.cli``).

    python tests/conformance/run.py --op Conv -v
"""

from epoxy_sdk.conformance.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
