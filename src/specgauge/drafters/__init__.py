"""Draft methods. Each module registers its drafter by kind name (see ``base``)."""

from specgauge.drafters.base import Drafter, drafter_kinds, make_drafter, register_drafter

__all__ = ["Drafter", "drafter_kinds", "make_drafter", "register_drafter"]
