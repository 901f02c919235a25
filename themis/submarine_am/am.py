"""``python -m themis.submarine_am.am`` of earlier releases: runs the YARN AM
(``python -m themis.am.launchers.yarn``)."""

import sys

from themis.am.launchers.yarn.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
