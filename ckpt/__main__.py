"""`python -m ckpt`: the `ckpt` command, for environments without the console script."""

from ckpt.cli.main import main

main()
