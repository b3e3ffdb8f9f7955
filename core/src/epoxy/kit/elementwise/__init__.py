"""Fused elementwise programs, one description for every backend (#17).

:mod:`.ops` says what each op is (arity, attributes, result kind, numpy reference),
:mod:`.program` holds the straight-line :class:`Program` and its numpy evaluation,
:mod:`.lower` turns ONNX nodes and fused groups into programs, :mod:`.groups` finds the
groups. Backends add only their spelling of each op (ep-cuda: CUDA C, ep-cpu: numba).
Pure numpy: no backend is imported here.
"""

from .groups import elementwise_groups
from .lower import bakeable, constants_of, lower_group, node_attrs, param_inputs_constant
from .ops import LOWERED, OPS, PARAM_INPUTS, VARIADIC, EwOp, np_erf
from .program import Instr, Program, ProgramBuilder, Ref, classify, evaluate_numpy, single_op_program

__all__ = ["LOWERED", "OPS", "PARAM_INPUTS", "VARIADIC", "EwOp", "Instr", "Program", "ProgramBuilder", "Ref",
           "bakeable", "classify", "constants_of", "elementwise_groups", "evaluate_numpy", "lower_group",
           "node_attrs", "np_erf", "param_inputs_constant", "single_op_program"]
