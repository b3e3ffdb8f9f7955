"""5. Run: the executors over a plan (``executor`` sequential, ``parallel_executor``), the
wrappers that observe steps (``profiling``, ``output_checks``), what guards a run at its
edges (``feeds`` in, ``output_safety`` out, ``limits``), and BLAS threads (``threads``)."""
