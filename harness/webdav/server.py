"""WsgiDAV over one folder, with one user (HTTP Basic), under waitress.

    python -m harness.webdav.server --root DIR --port N --user U --password P

The folder is the share: ``/<file name>`` reads a file, ``PUT`` replaces it (a new ETag). The
credentials are WsgiDAV's own (its simple domain controller); "access removed" is a restart with
other credentials (``WebDavServer.change_credentials``). ``--parent-pid``: exit when that process
is gone, so a killed test leaves no server behind.
"""

from __future__ import annotations

import argparse
import os
import threading
import time


def config(root: str, host: str, port: int, user: str, password: str) -> dict:
    return {
        "host": host,
        "port": port,
        "provider_mapping": {"/": root},
        "simple_dc": {"user_mapping": {"*": {user: {"password": password}}}},
        "http_authenticator": {
            "accept_basic": True,
            "accept_digest": False,
            "default_to_digest": False,
            # Basic over plain HTTP: loopback only (this is test equipment).
            "trusted_auth_header": None,
        },
        "dir_browser": {"enable": False},
        "lock_storage": True,
        "verbose": 1,
        "logging": {"enable": True, "enable_loggers": []},
    }


def _watch_parent(pid: int) -> None:
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            pass
        time.sleep(0.5)


def main(argv=None) -> None:
    from waitress import serve
    from wsgidav.wsgidav_app import WsgiDAVApp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args(argv)
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid,), daemon=True).start()
    app = WsgiDAVApp(config(args.root, args.host, args.port, args.user, args.password))
    serve(app, host=args.host, port=args.port, threads=4, ident="wsgidav")


if __name__ == "__main__":
    main()
