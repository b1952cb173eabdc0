"""Draft methods. Each module registers its drafter by kind name (see ``base``)."""

from specgauge.drafters.base import Drafter, drafter_kinds, make_drafter, register_drafter
from specgauge.drafters import draft_model as _draft_model  # noqa: F401,E402  (kind "draft_model"; torch loads lazily)
from specgauge.drafters import ngram as _ngram  # noqa: F401,E402  (kind "ngram")
from specgauge.drafters import suffix as _suffix  # noqa: F401,E402  (kind "suffix")
from specgauge.drafters import eagle as _eagle  # noqa: F401,E402  (kind "eagle3"; torch loads lazily)
from specgauge.drafters import mtp as _mtp  # noqa: F401,E402  (kind "mtp")
from specgauge.drafters import dflash as _dflash  # noqa: F401,E402  (kind "dflash"; torch loads lazily)
from specgauge.drafters import dspark as _dspark  # noqa: F401,E402  (kind "dspark"; torch loads lazily)

__all__ = ["Drafter", "drafter_kinds", "make_drafter", "register_drafter"]
