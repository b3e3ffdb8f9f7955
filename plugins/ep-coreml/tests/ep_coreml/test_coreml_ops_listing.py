"""``epoxy ops --provider coreml`` lists what the provider converts, marked as run only inside
the fused groups it compiles (the factory's ``group_ops``)."""

from __future__ import annotations

import json

from epoxy.cli.main import main
from epoxy_ep_coreml.factory import CoreMLProviderFactory
from epoxy_ep_coreml.ops import supported_ops


def test_group_ops_are_what_the_provider_converts():
    assert CoreMLProviderFactory().group_ops() == supported_ops()
    assert "Conv" in supported_ops() and "Relu" in supported_ops()


def test_epoxy_ops_lists_them_as_in_groups_only(capsys):
    assert main(["ops", "--provider", "coreml", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows["ops"] if isinstance(rows, dict) else rows
    conv = [r for r in rows if r["op"] == "Conv"]
    assert conv and conv[0]["runs"] == "in groups only", conv
