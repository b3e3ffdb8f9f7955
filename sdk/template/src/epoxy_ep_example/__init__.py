"""Template provider: Relu and Add on the host."""
