"""The ``epoxy`` command line: one module per subcommand, registered in ``main.COMMANDS``."""
