"""Mutation families of the fuzzer, one module each; ``families.py`` registers them."""
