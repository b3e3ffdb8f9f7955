"""A simulated CUDA device for machines without a GPU (tests, partition previews).

``fake_factory()`` is a provider factory named ``cuda`` whose device is a description
(no driver needed) and whose providers run on :class:`~epoxy_ep_cuda.backend.FakeBackend`:
same op table, capability, host-value analysis, fusion and copy placement as the GPU,
with the kernels evaluated by numpy::

    from epoxy_ep_cuda.testing import fake_registry
    session = epoxy.InferenceSession(model, providers=["cuda", "cpu"], registry=fake_registry())
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epoxy.contract import Device
from epoxy.hookspecs import hookimpl

from .factory import CudaProviderFactory
from .version import __version__

FAKE_DEVICE = Device("cuda", "gpu", 0, "Simulated GPU (epoxy_ep_cuda.testing)", 80 << 30,
                     properties={"compute_capability": "9.0", "multiprocessors": 132, "simulated": True,
                                 "vendor": "NVIDIA"})


class FakeCudaFactory:
    name = "cuda"
    vendor = "epoxy (simulated)"
    version = __version__
    sdk_api = "1.2"  # the epoxy SDK API written against (a literal: the core checks it; 1.2: compiled groups)
    priority = 100
    aliases = CudaProviderFactory.aliases  # code written for onnxruntime runs on the simulated GPU too

    def __init__(self) -> None:
        self.created: list[Any] = []

    def devices(self) -> Sequence[Device]:
        return [FAKE_DEVICE]

    def options(self) -> Mapping[str, str]:
        """The real factory's options: the simulated device takes the same ones."""
        from .options import TABLE

        return TABLE.describe()

    def create(self, device: Device, options: Mapping[str, Any]) -> Any:
        from .backend import FakeBackend
        from .options import TABLE
        from .provider import CudaProvider

        provider = CudaProvider(device, TABLE.parse(options), FakeBackend())
        self.created.append(provider)
        return provider


class _Plugin:
    def __init__(self, factory: FakeCudaFactory) -> None:
        self.factory = factory

    @hookimpl
    def epoxy_register_providers(self, register: Any) -> None:
        register(self.factory)


def fake_registry(factory: FakeCudaFactory | None = None, *, with_cpu: bool = True) -> Any:
    """A registry with the simulated cuda provider and (``with_cpu``) the installed ``cpu``
    provider, loaded through its ``epoxy.providers`` entry point as any session loads it.

    ep-cuda never imports another plugin (it does not depend on one): when no cpu provider is
    installed the registry simply has none, and a session asking for ``cpu`` says so."""
    from importlib import metadata

    from epoxy.plugins import ENTRY_POINT_GROUP, ProviderRegistry

    registry = ProviderRegistry(autoload=False)
    registry.add_plugin(_Plugin(factory or FakeCudaFactory()), name="cuda-fake")
    if with_cpu:
        registry.load_entry_points(ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == "cpu")
    return registry
