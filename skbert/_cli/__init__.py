"""The ``skbert`` console command: ``skbert embed`` and ``skbert probe``.

The parser, the two commands and their exit codes (``_command``: :func:`run`
is the console script's entry point, ``python -m skbert._cli`` runs it too);
what the commands read and write, text files, CSV, JSON lines, Parquet and
standard input, with missing texts handled as ``--missing`` says, and the
progress file that lets ``--resume`` continue an interrupted run
(``_inputs``).
"""

from skbert._cli._command import main, run

__all__ = ["main", "run"]
