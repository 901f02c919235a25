"""``python -m themis.submarine_am.tbserve`` of earlier releases: runs
:mod:`themis.am.launchers.yarn.tbserve`."""

import sys

from themis.am.launchers.yarn.tbserve import main

if __name__ == "__main__":
    sys.exit(main())
