"""Walk the project's URL resolver and turn every pattern into real URLs to request.

The security tests use this instead of a list of URLs, so a view the console owner adds later
is checked without anyone editing the tests. Path arguments come from two places: the links
and form actions on the pages already visited (a runbook index links to its runbooks), and
whatever the database holds (the demo seed plus a row per state, see conftest.py), where the
argument's name picks the likely model and its converter the kind of value.
"""

import html
import itertools
import re
from dataclasses import dataclass, field

from django.urls import Resolver404, URLPattern, URLResolver, get_resolver, resolve
from django.urls.converters import IntConverter, UUIDConverter
from django.urls.resolvers import RoutePattern

_PLACEHOLDER = re.compile(r"<(?:(?P<conv>[^>:]+):)?(?P<name>\w+)>")
MAX_URLS_PER_ROUTE = 40


@dataclass
class Route:
    route: str  # "console/operations/<uuid:op_id>/retry/" (regex text for regex patterns)
    callback: object
    name: str | None
    converters: dict = field(default_factory=dict)
    is_regex: bool = False

    @property
    def module(self) -> str:
        view_class = getattr(self.callback, "view_class", None)
        return (view_class or self.callback).__module__

    @property
    def normalized(self) -> str:
        """The route with converter names dropped: "intake/events/<source>/"."""
        return _PLACEHOLDER.sub(lambda m: f"<{m['name']}>", self.route)

    @property
    def arg_names(self) -> list[str]:
        return [m["name"] for m in _PLACEHOLDER.finditer(self.route)]

    def __str__(self):
        return f"/{self.route} -> {self.module}"


def walk(patterns=None, prefix="", converters=None, is_regex=False):
    """Every URLPattern under the root resolver, with its full route text."""
    if patterns is None:
        patterns = get_resolver().url_patterns
    for entry in patterns:
        pattern = entry.pattern
        regex = is_regex or not isinstance(pattern, RoutePattern)
        text = prefix + str(pattern)
        merged = {**(converters or {}), **getattr(pattern, "converters", {})}
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns, text, merged, regex)
        elif isinstance(entry, URLPattern):
            yield Route(text, entry.callback, entry.name, merged, regex)


# Machine-to-machine endpoints in those apps, not console pages: a mail provider's delivery
# reports and residents' replies (signed; tests/ledger/test_delivery.py, test_inbound.py).
MACHINE_ROUTES = {"delivery/mailgun/", "inbound/mailgun/"}


def console_routes(modules=("recovery.", "ledger.")):
    """Routes whose views live in the console apps: every page and every action button."""
    return [
        r for r in walk() if r.module.startswith(modules) and r.normalized not in MACHINE_ROUTES
    ]


# --- filling path arguments -----------------------------------------------------------------


def candidate_pool():
    """Candidate values from the database, by kind (uuid, int, str), a few per state."""
    from django.contrib.auth import get_user_model

    from intake import residentlink
    from intake.models import Category, Enquiry, Revision
    from ledger.models import Attempt, Integration, JournalEntry, Operation

    def per_state(queryset, *fields):
        seen, rows = set(), []
        for row in queryset.order_by("pk").values_list("state", *fields):
            if row[0] not in seen:
                seen.add(row[0])
                rows.append(row[1:])
        return rows

    enquiries = per_state(Enquiry.objects, "pk", "reference")
    operations = per_state(Operation.objects, "pk")
    users = list(get_user_model().objects.order_by("pk").values_list("pk", "username")[:5])
    integrations = list(Integration.objects.order_by("pk").values_list("pk", "name"))
    categories = list(Category.objects.order_by("pk").values_list("pk", "slug"))
    numbers = sorted(set(Revision.objects.values_list("number", flat=True)) | {1})
    attempts = list(Attempt.objects.order_by("pk").values_list("pk", flat=True)[:3])
    journal = list(JournalEntry.objects.order_by("pk").values_list("pk", flat=True)[:2])
    # The resident page's signed links (intake.residentlink), one per enquiry state.
    tokens = [
        residentlink.token_for(e)
        for e in Enquiry.objects.filter(pk__in=[pk for pk, _ in enquiries])
    ]
    from ledger import wording
    from recovery.views.wording import ACTION_KINDS

    return {
        "resident": {"str": tokens},
        # The residents' messages (ledger.wording) and the actions whose message is previewed.
        "message": {"str": list(wording.KINDS)},
        "preview": {"str": list(ACTION_KINDS)},
        "operation": {"uuid": [str(pk) for (pk,) in operations]},
        "enquiry": {
            "uuid": [str(pk) for pk, _ in enquiries],
            "str": [ref for _, ref in enquiries],
        },
        "integration": {
            "int": [pk for pk, _ in integrations],
            "str": [name for _, name in integrations],
        },
        "category": {"int": [pk for pk, _ in categories], "str": [s for _, s in categories]},
        "user": {"int": [pk for pk, _ in users], "str": [name for _, name in users]},
        "revision": {"int": numbers},
        "attempt": {"int": attempts},
        "journal": {"int": journal},
    }


_HINTS = [
    (re.compile(r"^(op|ops|operation)(_?id|_?pk)?$|operation"), "operation"),
    (re.compile(r"enquiry|reference|^ref$"), "enquiry"),
    (re.compile(r"integration|^name$|^system$"), "integration"),
    (re.compile(r"categor|^slug$"), "category"),
    (re.compile(r"user|owner|username"), "user"),
    (re.compile(r"revision|^number$|^n$"), "revision"),
    (re.compile(r"attempt"), "attempt"),
    (re.compile(r"journal|entry"), "journal"),
    (re.compile(r"^token$"), "resident"),
    (re.compile(r"^kind$"), "message"),
    (re.compile(r"^action$"), "preview"),
]


def _kind(converter) -> str:
    if isinstance(converter, UUIDConverter):
        return "uuid"
    if isinstance(converter, IntConverter):
        return "int"
    return "str"


def _candidates(name, converter, pool):
    kind = _kind(converter)
    hinted = [model for rx, model in _HINTS if rx.search(name)]
    models = hinted or list(pool)
    values = []
    for model in models:
        values += pool[model].get(kind, [])
    if kind == "str":  # a str or slug argument may hold a UUID or a number as well
        for model in models:
            values += [str(v) for v in pool[model].get("uuid", []) + pool[model].get("int", [])]
    return list(dict.fromkeys(values)) or ["0"]


def urls_for(route: Route, pool=None) -> list[str]:
    """Concrete URLs for a route, one per combination of candidate arguments (bounded)."""
    if route.is_regex:
        raise AssertionError(
            f"{route}: regex URL patterns cannot be walked; use path() in the console apps."
        )
    pool = pool if pool is not None else candidate_pool()
    placeholders = list(_PLACEHOLDER.finditer(route.route))
    if not placeholders:
        return ["/" + route.route]
    choices = [_candidates(m["name"], route.converters.get(m["name"]), pool) for m in placeholders]
    urls = []
    for combo in itertools.islice(itertools.product(*choices), MAX_URLS_PER_ROUTE):
        values = iter(combo)
        urls.append(
            "/"
            + _PLACEHOLDER.sub(
                lambda m, values=values: route.converters[m["name"]].to_url(next(values)),
                route.route,
            )
        )
    return urls


_LINK = re.compile(r"""(?:href|action)=["'](/[^"'#?]*)""")


def crawl(client, routes, *, check=None, pool=None) -> dict[str, list[int]]:
    """GET every route's URLs (pages without arguments first, harvesting their links).

    ``check(url, response)`` runs after each GET. A route that answers 405 once answers 405
    for any argument, so it is not asked again. Returns {route: [status, ...]}.
    """
    pool = pool if pool is not None else candidate_pool()
    wanted = {r.route for r in routes}
    harvested: dict[str, list[str]] = {}

    def harvest(response):
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            return
        for link in _LINK.findall(response.content.decode(errors="replace")):
            link = html.unescape(link)
            try:
                match = resolve(link)
            except Resolver404:
                continue
            if match.route in wanted:
                harvested.setdefault(match.route, []).append(link)

    seen = {}
    for route in sorted(routes, key=lambda r: len(r.arg_names)):
        urls = list(dict.fromkeys(harvested.get(route.route, []) + urls_for(route, pool)))
        statuses = []
        for url in urls[:MAX_URLS_PER_ROUTE]:
            response = client.get(url)
            if check is not None:
                check(url, response)
            statuses.append(response.status_code)
            if response.status_code == 405:
                break
            harvest(response)
        seen[str(route)] = statuses
    return seen


# --- odd values: every view, in its path, its query and its form ----------------------------

# Percent-encoded as they travel: "²" (str.isdigit() says yes, int() says no), NUL (PostgreSQL
# text cannot hold it), a number past any integer column, a lone UTF-16 surrogate as UTF-8
# (invalid: Django decodes it with replacement), an invalid byte, a very long value.
ODD_VALUES = {
    "superscript two": "%C2%B2",
    "NUL": "%00",
    "huge number": "99999999999",
    "huger number": "9" * 40,
    "lone surrogate": "%ED%A0%80",
    "invalid byte": "%FF",
    "negative": "-1",
    "very long": "x" * 5000,
    # issue 26: digits float() and int() read ("٣", "1_000"), a rate that overflows, a word
    # that is not a number, a search of thousands of words.
    "arabic-indic three": "%D9%A3",
    "underscored": "1_000",
    "tiny float": "5e-324",
    "not a number": "abc",
    "many words": "w+" * 2500,
}
# Values worth sending one parameter at a time (a 400 or redirect for one parameter must not
# hide a 500 for another); NUL is refused for the whole request whichever name carries it.
ODD_ONE_BY_ONE = ("superscript two", "huger number", "not a number")
ODD_IN_PATHS = ("superscript two", "NUL", "huger number", "lone surrogate", "very long")
# Names every view is sent, beside those its own page shows in links and forms.
COMMON_NAMES = (
    "page",
    "p",
    "owner",
    "q",
    "state",
    "integration",
    "op",
    "action",
    "unresolved",
    "overdue",
    "mine",
    "next",
    "reason",
    "o",
    "e",
    "created_at__year",
    "created_at__month",
    "created_at__day",
    "state__exact",
)

# Sent one at a time on every page, beside the names in the page's own links (the admin's
# filters: state__exact, created_at__year, ...).
ONE_BY_ONE_NAMES = ("page", "p", "owner", "o", "q")
# Under the Hypothesis profile "ci" (tests/conftest.py: CI=true) every odd value goes to every
# URL; otherwise each URL gets ODD_VALUES_PER_URL of them, the window moving one value on from
# URL to URL (every value still reaches many URLs), and one value per name sent one at a time.
ODD_VALUES_PER_URL = 3

_QUERY_NAMES = re.compile(r"""href=["'][^"'#]*\?([^"'#]*)""")
_INPUT_NAMES = re.compile(r"""<(?:input|select|textarea)[^>]*\bname=["']([^"']+)""")
_ANY_LINK = re.compile(r"""(?:href|action)=["'](/[^"'#]*)""")


def names_on(response) -> tuple[set[str], set[str]]:
    """(query parameter names in a page's links, names of its form fields)."""
    if "html" not in response.get("Content-Type", ""):
        return set(), set()
    text = response.content.decode(errors="replace")
    fields = set(_INPUT_NAMES.findall(text)) - {"csrfmiddlewaretoken"}
    linked = set()
    for query in _QUERY_NAMES.findall(text):
        for pair in html.unescape(query).split("&"):
            if pair:
                linked.add(pair.split("=", 1)[0])
    return linked - {""}, fields


def links_under(response, prefix: str) -> list[str]:
    if "html" not in response.get("Content-Type", ""):
        return []
    text = response.content.decode(errors="replace")
    return [html.unescape(u) for u in _ANY_LINK.findall(text) if u.startswith(prefix)]


def admin_urls(client, limit: int = 400) -> list[str]:
    """The admin's pages, found the way a person finds them: index, app lists, change lists,
    one change page per list, add pages, history pages (breadth first, bounded)."""
    seen, queue = [], ["/admin/"]
    while queue and len(seen) < limit:
        url = queue.pop(0)
        # A history or delete page per object adds nothing a change page does not show.
        if url in seen or re.search(r"/(logout|password|history|delete)/$", url):
            continue
        seen.append(url)
        response = client.get(url)
        if response.status_code != 200:
            continue
        rows = 0
        for link in links_under(response, "/admin/"):
            path = link.split("?")[0]
            if path in seen or path in queue:
                continue
            if re.search(r"/admin/[^/]+/[^/]+/[^/]+/change/$", path):
                rows += 1
                if rows > 1:  # one object per change list is enough
                    continue
            queue.append(path)
    return seen


def odd_paths(url: str) -> list[tuple[str, str]]:
    """(label, url) with each path argument of ``url`` replaced by each odd value."""
    try:
        match = resolve(url.split("?")[0])
    except Resolver404:
        return []
    out = []
    for value in {str(v) for v in match.kwargs.values() if str(v) and f"/{v}/" in url}:
        for label in ODD_IN_PATHS:
            out.append((f"path {label}", url.replace(f"/{value}/", f"/{ODD_VALUES[label]}/", 1)))
    return out


def assault(client, urls, *, check, every=None) -> int:
    """Send odd values to each URL: in each path argument (GET and POST), in its query (every
    name at once, then the likeliest offenders one name at a time) and in a form POST of every
    field. ``check(description, response)`` sees every answer; returns how many were sent.
    ``every``: each odd value to each URL (default: under the Hypothesis profile "ci")."""
    if every is None:
        every = thorough()
    sent = 0

    def send(method, url, body=None, what=""):
        nonlocal sent
        sent += 1
        if method == "GET":
            response = client.get(url)
        else:
            response = client.post(
                url, body or "", content_type="application/x-www-form-urlencoded"
            )
        check(f"{method} {url[:200]} ({what})", response)
        return response

    labels = list(ODD_VALUES)
    for number, url in enumerate(urls):
        base = url.split("?")[0]
        linked, fields = names_on(client.get(base))
        names = sorted(set(COMMON_NAMES) | linked | fields)
        chosen = labels if every else _window(labels, number, ODD_VALUES_PER_URL)
        for label in chosen:
            odd = ODD_VALUES[label]
            query = "&".join(f"{name}={odd}" for name in names)
            send("GET", f"{base}?{query}", what=f"every name {label}")
            send("POST", base, query, what=f"form {label}")
        for turn, name in enumerate(sorted(set(ONE_BY_ONE_NAMES) | linked)):
            one_by_one = ODD_ONE_BY_ONE if every else _window(ODD_ONE_BY_ONE, number + turn, 1)
            for label in one_by_one:
                send("GET", f"{base}?{name}={ODD_VALUES[label]}", what=f"{name} {label}")
        for what, odd_url in odd_paths(base):
            send("GET", odd_url, what=what)
            send("POST", odd_url, "reason=odd+path", what=what)
    return sent


def thorough() -> bool:
    """The Hypothesis profile "ci" is loaded (tests/conftest.py): every value everywhere."""
    from hypothesis import settings as hypothesis_settings

    return hypothesis_settings.default.max_examples >= 1000


def _window(items, start: int, size: int) -> list:
    return [items[(start + i) % len(items)] for i in range(min(size, len(items)))]
