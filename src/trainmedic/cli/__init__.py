"""The ``trainmedic`` command: thin argument parsing over the library, the only layer that exits."""
