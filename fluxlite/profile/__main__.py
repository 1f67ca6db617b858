"""``python -m fluxlite.profile``: the ``fluxlite-profile`` command (:mod:`fluxlite.profile.cli`)."""

import sys

from .cli import main

sys.exit(main())
