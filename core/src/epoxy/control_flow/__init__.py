"""Control flow run by the core: If, Loop, Scan and SequenceMap with nested subgraphs."""

from .provider import PROVIDER_NAME, ControlFlowProvider
from .subplan import SubPlan

__all__ = ["PROVIDER_NAME", "ControlFlowProvider", "SubPlan"]
