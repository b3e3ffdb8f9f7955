"""The onnxruntime-shaped surface around a session: ``OrtValue`` (``ort_value``),
``IOBinding`` (``io_binding``) and the device feeds/fetches they ride on (``device_io``,
``value_devices``), provider-name lists (``provider_names``) and module-level runtime
information (``runtime_info``)."""
