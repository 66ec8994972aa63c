"""An e-mail address as the SMTP envelope and the message's headers carry it (RFC 5321, 6531).

The domain of every address is written in ASCII: an international domain name (``bücher.de``)
becomes its IDNA A-label (``xn--bcher-kva.de``, IDNA 2008 with UTS 46 mapping, by the ``idna``
library), so it needs nothing from the relay. A local part outside ASCII (``josé@…``,
``用户@…``) can only be written where the relay offers SMTPUTF8 (RFC 6531): ``needs_smtputf8``
says so, and ledger.smtp decides before anything is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.utils import parseaddr

import idna


class AddressError(ValueError):
    """An address that cannot be written at all (in words)."""


@dataclass(frozen=True)
class MailAddress:
    local: str
    domain: str  # ASCII (an A-label where the name was international), or a [literal]
    written: str  # what was given, for the words a person reads
    name: str = ""

    @property
    def address(self) -> str:
        return f"{self.local}@{self.domain}"

    def header(self) -> str:
        """As an address header writes it (``Name <address>``)."""
        if not self.name:
            return self.address
        name = self.name.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{name}" <{self.address}>'

    @property
    def needs_smtputf8(self) -> bool:
        return not self.local.isascii()


def ascii_domain(domain: str, written: str) -> str:
    if domain.isascii() or domain.startswith("["):
        return domain
    try:
        return idna.encode(domain, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError) as exc:
        raise AddressError(
            f"the address {written} cannot be written: its domain {domain} is not a valid "
            f"international domain name ({exc})"
        ) from None


def parse(value: str) -> MailAddress:
    """``value`` (a bare address or ``Name <address>``) as the envelope writes it."""
    name, address = parseaddr(str(value or ""))
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain:
        raise AddressError(f"{value!r} is not an e-mail address")
    if any(ch in name + address for ch in "\r\n\x00"):
        raise AddressError("an address cannot hold a line break")
    return MailAddress(local, ascii_domain(domain, address), address, name)
