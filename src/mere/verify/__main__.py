"""``python -m mere.verify URI``: the same as ``mere verify URI``."""

from mere.cli.verify import main

if __name__ == "__main__":
    main()
