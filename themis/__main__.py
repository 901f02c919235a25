"""``python -m themis``: the ``themis`` command (:func:`themis.cli.main`)."""

import sys

from themis.cli import main

if __name__ == "__main__":
    sys.exit(main())
