"""What a new provider may be called, and every name derived from it.

One provider name fixes the entry point, the import package (``epoxy_ep_<name>``), the
distribution (``epoxy-ep-<name>``), the classes and the default folder; deriving them all
here keeps a generated package consistent with the in-house ones.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

from epoxy.errors import InvalidArgumentError
from epoxy.plugins import RESERVED_NAMES

#: names a new provider may not take: the core's own (``core``, ``copy``), the in-house
#: providers' (installing both would refuse one), and words the core gives other meanings
#: (``host`` names host memory in ``output_device``)
TAKEN_NAMES = frozenset(RESERVED_NAMES | {"cpu", "cuda", "openvino", "coreml", "host", "all", "default", "none"})
_NAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
MAX_LENGTH = 40


class ScaffoldError(InvalidArgumentError):
    """A provider name or target folder the generator refuses (an ``InvalidArgumentError``, so
    the ``epoxy`` CLI reports it as a usage error)."""


@dataclass(frozen=True)
class Names:
    """The names a provider called ``name`` goes by."""

    name: str  # entry point and factory name: "my_npu"
    package: str  # import package: "epoxy_ep_my_npu"
    distribution: str  # pip name: "epoxy-ep-my-npu"
    title: str  # class prefix: "MyNpu"
    folder: str  # default folder: "ep-my-npu"


def validate_name(name: str) -> str:
    """``name`` if a provider may be called so, else :class:`ScaffoldError` saying why."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ScaffoldError(
            f"provider name {name!r} is not valid: use lowercase letters, digits and single underscores, "
            "starting with a letter (e.g. 'my_npu')")
    if len(name) > MAX_LENGTH:
        raise ScaffoldError(f"provider name {name!r} is longer than {MAX_LENGTH} characters")
    if name in TAKEN_NAMES or keyword.iskeyword(name):
        raise ScaffoldError(f"provider name {name!r} is reserved or taken by an epoxy provider; pick another "
                            f"(taken: {', '.join(sorted(TAKEN_NAMES))})")
    return name


def names_for(name: str) -> Names:
    validate_name(name)
    return Names(
        name=name,
        package=f"epoxy_ep_{name}",
        distribution=f"epoxy-ep-{name.replace('_', '-')}",
        title="".join(part.capitalize() for part in name.split("_")),
        folder=f"ep-{name.replace('_', '-')}",
    )
