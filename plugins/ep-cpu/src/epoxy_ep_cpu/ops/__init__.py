"""Op families: each module registers its kernels into ``epoxy_ep_cpu.registry.KERNELS``."""
