"""``python -m harness.faultproxy --upstream URL [--port P] [--target NAME='METHOD /path']``."""

from harness.faultproxy.server import main

if __name__ == "__main__":
    main()
