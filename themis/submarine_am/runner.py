"""``python -m themis.submarine_am.runner`` of earlier releases: runs
:mod:`themis.am.launchers.yarn.runner`."""

import sys

from themis.am.launchers.yarn.runner import main

if __name__ == "__main__":
    sys.exit(main())
