"""A real WebDAV server for the document integration's tests, drill and soak: WsgiDAV, a
program Handover did not write, served by waitress in its own process (``harness.webdav.server``)
and driven from here (``WebDavServer``). Nothing to build or cache: WsgiDAV is a pinned
test requirement, and a start takes well under a second (docs/sandbox.md).
"""

from harness.webdav.process import WebDavServer

__all__ = ["WebDavServer"]
