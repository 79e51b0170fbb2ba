"""``python -m loomctx``: the `loomctx` command, for an environment without its script on PATH."""

from loomctx.cli import main

if __name__ == "__main__":
    main()
