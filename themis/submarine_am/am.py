"""``python -m themis.submarine_am.am`` of earlier releases: runs
:mod:`themis.am.launchers.yarn.am`."""

import sys

from themis.am.launchers.yarn.am import main

if __name__ == "__main__":
    sys.exit(main())
