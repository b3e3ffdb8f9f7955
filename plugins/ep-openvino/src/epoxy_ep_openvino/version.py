"""Version of epoxy-ep-openvino."""

__version__ = "0.1.0"
