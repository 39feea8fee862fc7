"""`ckpt bench`: measure snapshot and restore on the user's own tree across a settings grid.

A thin wrapper over `ckpt.tuning.tune.run_tuning`: it works on a scratch copy with a temporary
store, so the user's tree and store are never modified.
"""

from __future__ import annotations

import sys

import click

from ckpt.cli.context import State, json_option, pass_state
from ckpt.cli.render import write_json


def _levels(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of integers: {text!r}") from None


_SWITCH = {"on": True, "true": True, "off": False, "false": False}


def _switches(text: str | None) -> tuple[bool, ...] | None:
    if text is None:
        return None
    parts = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not parts or any(part not in _SWITCH for part in parts):
        raise click.BadParameter(f"not a comma-separated list of on/off: {text!r}")
    return tuple(_SWITCH[part] for part in parts)


@click.command(epilog="""\b
Examples:
  ckpt bench                          # the default grid: levels 1,3,6 x threads 1,auto
  ckpt bench --levels 1,3 --threads 0 --json
  ckpt bench --max-files 5000         # sample a big tree instead of copying all of it
  ckpt bench --levels 1 --threads 0 --deltas on --delta-chains 4,8,16
""")
@click.option("--levels", default="1,3,6", show_default=True, metavar="L,L",
              help="zstd compression levels to try.")
@click.option("--threads", "threads_text", default="1,0", show_default=True, metavar="N,N",
              help="Hashing threads to try (0 = one per core).")
@click.option("--dictionaries", "dictionaries_text", metavar="on,off",
              help="Dictionaries for small objects to try, each alone at the default level "
                   "[default: as configured, then the other].")
@click.option("--deltas", "deltas_text", metavar="on,off",
              help="Deltas against a file's previous version to try, each alone "
                   "[default: as configured, then the other].")
@click.option("--delta-chains", "chains_text", metavar="K,K",
              help="Delta chain bounds to try, each alone [default: as configured].")
@click.option("--block-sizes", "blocks_text", metavar="N,N",
              help="Block sizes in bytes to try (0 = no blocks), each alone [default: as "
                   "configured, then blocks off (or on, when off)].")
@click.option("--max-files", default=20_000, show_default=True, type=click.IntRange(min=1),
              help="Larger trees are sampled (seeded) down to this many files.")
@click.option("--time-budget", default=300.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds; settings left when it runs out are reported as skipped.")
@json_option
@pass_state
def bench(state: State, levels: str, threads_text: str, dictionaries_text: str | None,
          deltas_text: str | None, chains_text: str | None, blocks_text: str | None,
          max_files: int, time_budget: float, as_json: bool) -> None:
    """Measure snapshot, no-change snapshot and restore on a scratch copy of this tree.

    Prints a table per setting and a recommendation (with the `ckpt config set` commands).
    Your tree and store are never modified.
    """
    from ckpt.tuning.tune import render_table, run_tuning

    def say(message: str) -> None:
        if state.progress_enabled and sys.stderr.isatty():
            click.echo(message, err=True)

    result = run_tuning(state.root, store=state.store_dir, levels=_levels(levels),
                        threads=_levels(threads_text), dictionaries=_switches(dictionaries_text),
                        deltas=_switches(deltas_text),
                        delta_chains=None if chains_text is None else _levels(chains_text),
                        block_sizes=None if blocks_text is None else _levels(blocks_text),
                        max_files=max_files,
                        time_budget=time_budget, progress=say)
    if as_json:
        write_json(result.to_json())
    else:
        click.echo(render_table(result))


COMMANDS = [bench]
