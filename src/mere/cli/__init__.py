"""The ``mere`` command-line interface.

The click group is :data:`cli`; the console-script entry point is
:func:`mere.cli.main.main` (not re-exported here, so that ``mere.cli.main``
stays the module).
"""

from mere.cli.main import cli

__all__ = ["cli"]
