"""The graph as providers see it: ``graph_spec.CoreGraph`` (the ``GraphSpec`` of the
contract), node groups exported as standalone models (``subgraph_export``, ``export_opsets``),
and the small vocabularies every stage shares (``dtypes``, ``names``, ``type_strings``)."""
