"""The product's settings, with one URL: the ceiling view (bench/ceiling/__init__.py)."""

from config.settings import *  # noqa: F403

ROOT_URLCONF = "bench.ceiling.urls"
