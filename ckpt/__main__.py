"""`python -m ckpt`: the `ckpt` command, for environments without the console script."""

try:
    from ckpt.cli import main
except KeyboardInterrupt:  # Ctrl-C before the command's own handling exists: say it as it does
    import sys

    try:
        sys.stderr.write("ckpt: error: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    raise SystemExit(130) from None

main()
