"""`ckpt schema [NAME]`: list the JSON Schemas of the `--json` outputs, or print one.

The files live in `ckpt/schemas/` (package data); this command only reads them, so it needs
no store, no workspace and no validator.
"""

from __future__ import annotations

import sys

import click

from ckpt.cli.context import json_option
from ckpt.cli.render import write_json, write_lines


@click.command(epilog="""\b
Examples:
  ckpt schema                 # the names, one a line
  ckpt schema record          # the schema of 'ckpt create --json'
  mkdir -p schemas && for n in $(ckpt schema); do ckpt schema "$n" > "schemas/$n.json"; done
""")
@click.argument("name", required=False)
@json_option
def schema(name: str | None, as_json: bool) -> None:
    """List the JSON Schemas of every --json output, or print schema NAME.

    Draft 2020-12, one file per output; they refer to each other by relative $ref
    (record.json#/$defs/time), so keep them together in one folder. With --json and no NAME:
    the names as a JSON array.
    """
    from ckpt.cli.errors import USAGE, CliError
    from ckpt.schemas import UnknownSchema, names, text

    if name is None:
        if as_json:
            write_json(list(names()))
        else:
            write_lines(names())
        return
    try:
        found = text(name)
    except UnknownSchema:
        shown = name.encode("utf-8", "backslashreplace").decode()
        raise CliError(f"unknown schema {shown!r}: the schemas are {', '.join(names())}",
                       code=USAGE) from None
    sys.stdout.write(found)
    sys.stdout.flush()


COMMANDS = [schema]
