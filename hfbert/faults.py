"""``hfbert.faults`` is :mod:`hfbert.studies.faults` under its earlier name, so ``from hfbert.faults import ...`` keeps
working: importing this module yields that one (the same module object, not a copy)."""

import sys

from .studies import faults

sys.modules[__name__] = faults
