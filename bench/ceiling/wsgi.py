import os

os.environ["DJANGO_SETTINGS_MODULE"] = "bench.ceiling.settings"
# The same routing as the product (config/webhooks.py): the ceiling's view sits at the webhook
# path, so its requests pass the same short middleware chain as intake's.
from config.webhooks import application

__all__ = ["application"]
