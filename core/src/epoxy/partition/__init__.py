"""3. Partition: each node to the best provider that claims it, fused groups kept convex, and
the report of what went where and why (``partitioner``, ``report``)."""
