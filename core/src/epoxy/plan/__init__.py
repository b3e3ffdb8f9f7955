"""4. Plan: a partition -> an execution plan: kernels and compiled groups resolved, device
copies inserted, value slots and release points fixed (``plan_builder``), memory planned
(``planner``, ``arena``), graph inputs/outputs placed per device (``placement``)."""
