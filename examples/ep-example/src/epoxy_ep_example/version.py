"""Version of epoxy-ep-example (also the factory's ``version``, shown by ``epoxy providers``)."""

__version__ = "0.1.0"
