import sys

from themis.sim.cli import main

sys.exit(main())
