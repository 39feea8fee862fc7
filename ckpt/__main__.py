"""`python -m ckpt`: the `ckpt` command, for environments without the console script."""

try:
    from ckpt.cli import main
except KeyboardInterrupt:  # Ctrl-C before the command's own handling exists
    raise SystemExit(130) from None

main()
