"""Kernel families; each registers into :data:`epoxy_ep_cuda.ops_table.OPS`."""
