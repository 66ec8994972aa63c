import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from intake.classification import judge, suggest_category
from intake.models import Enquiry, Suggestion
from intake.suggesters import (
    Answer,
    Candidate,
    KeywordSuggester,
    OpenAIChatSuggester,
    SuggesterError,
    get_suggester,
)
from ledger.models import JournalEntry
from tests.intake.factories import EnquiryFactory

CANDIDATES = [
    Candidate("website", "Website", keywords=("website", "login", "page")),
    Candidate("repairs", "Repairs", keywords=("leak", "boiler", "broken")),
    Candidate("waste", "Waste", keywords=("bin", "bins", "garden waste")),
]


# --- the keyword provider ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "label", "confidence"),
    [
        ("My BOILER has a leak", "repairs", 1.0),
        ("The login page is broken", "website", 0.667),
        ("Garden waste bin missed", "waste", 1.0),
        ("My cabinet is binary", None, None),  # whole words only
        ("Hello", None, None),
        ("A broken bin", None, None),  # a tie abstains
    ],
)
def test_keywords(text, label, confidence):
    answer = KeywordSuggester().suggest(text, CANDIDATES)
    assert answer.label == label
    assert answer.confidence == confidence
    assert json.loads(answer.raw_output) is not None


# --- validation against the exact active set --------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "label", "validation"),
    [
        (Answer("waste", 0.9), "waste", "valid"),
        (Answer("waste", None), "waste", "valid"),
        (Answer("parking", 0.99), "unresolved", "'parking' is a retired category"),
        (Answer("Waste", 0.9), "unresolved", "'Waste' is not an active category"),
        (Answer("bins and waste", 0.9), "unresolved", "'bins and waste' is not an active category"),
        (Answer("waste", 0.3), "unresolved", "confidence 0.30 is below 0.60"),
        (Answer("waste", 7), "unresolved", "confidence 7 is outside 0..1"),
        (Answer("waste", "high"), "unresolved", "confidence 'high' is not a number"),
        (Answer("waste", float("nan")), "unresolved", "confidence 'nan' is not a number"),
        (Answer(None, None, explanation="tie"), "unresolved", "abstained: tie"),
    ],
)
def test_judge(answer, label, validation):
    verdict = judge(answer, active={"waste", "website"}, retired={"parking"}, min_confidence=0.6)
    assert (verdict.label, verdict.validation) == (label, validation)


# --- the service ------------------------------------------------------------------------------


class Fixed:
    """A suggester that answers what it is told (a real object, not a mock: the protocol is
    four attributes and one method)."""

    name, model, prompt_version = "fixed", "fixed-model", "p1"

    def __init__(self, answer=None, error=None):
        self.answer, self.error, self.calls = answer, error, []

    def suggest(self, text, candidates):
        self.calls.append((text, [c.slug for c in candidates]))
        if self.error:
            raise self.error
        return self.answer


@pytest.mark.django_db
def test_a_valid_suggestion_sets_the_category_on_a_new_revision(demo_categories):
    enquiry = EnquiryFactory(subject="Bins", message="My bin was not emptied this week.")
    suggestion = suggest_category(enquiry)

    enquiry.refresh_from_db()
    assert suggestion.label == "waste"
    assert suggestion.validation == "valid"
    assert (suggestion.provider, suggestion.model, suggestion.prompt_version) == (
        "keywords",
        "keywords",
        "kw-1",
    )
    assert suggestion.raw_output and suggestion.explanation
    assert suggestion.revision == 1 and suggestion.applied_revision == 2
    assert enquiry.current_revision == 2
    assert enquiry.category.slug == "waste"
    assert enquiry.revision.origin == "suggestion"
    assert enquiry.revision.fields["category"] == "waste"
    assert enquiry.state == "ready_for_review"
    row = JournalEntry.objects.filter(subject_type="intake.enquiry").last()
    assert row.actor == "model:keywords@kw-1"
    assert row.evidence["suggestion"] == suggestion.pk
    assert enquiry.message == "My bin was not emptied this week."


@pytest.mark.django_db
def test_the_suggester_sees_only_the_active_set_and_the_text(demo_categories):
    provider = Fixed(Answer("waste", 0.9))
    suggest_category(EnquiryFactory(subject="S", message="M"), provider=provider)
    assert provider.calls == [("S\n\nM", ["repairs", "waste", "website"])]


@pytest.mark.django_db
def test_a_retired_category_from_a_provider_ends_unresolved_never_routed(demo_categories):
    enquiry = EnquiryFactory(message="I need a parking permit.")
    suggestion = suggest_category(enquiry, provider=Fixed(Answer("parking", 0.99)))

    enquiry.refresh_from_db()
    assert suggestion.label == "unresolved"
    assert suggestion.category is None
    assert suggestion.validation == "'parking' is a retired category"
    assert suggestion.raw_output == "" and suggestion.applied_revision is None
    assert enquiry.category is None
    assert enquiry.current_revision == 1
    assert enquiry.revision.category is None
    assert enquiry.state == "ready_for_review"  # to review, with nothing routed


@pytest.mark.django_db
def test_a_keyword_provider_configured_with_a_retired_category_ends_unresolved(demo_categories):
    rules = [Candidate("parking", "Parking", keywords=("parking",))]

    class StaleKeywords(KeywordSuggester):
        def suggest(self, text, candidates):
            return super().suggest(text, rules)

    suggestion = suggest_category(
        EnquiryFactory(message="parking parking"), provider=StaleKeywords()
    )
    assert (suggestion.label, suggestion.validation) == (
        "unresolved",
        "'parking' is a retired category",
    )


@pytest.mark.django_db
def test_a_category_retired_while_the_model_thinks_is_retired(demo_categories):
    waste = demo_categories["waste"]

    class RetiresMidway(Fixed):
        def suggest(self, text, candidates):
            waste.active = False
            waste.save()
            return Answer("waste", 0.95)

    suggestion = suggest_category(EnquiryFactory(), provider=RetiresMidway())
    assert suggestion.label == "unresolved"
    assert "retired" in suggestion.validation


@pytest.mark.django_db
@pytest.mark.parametrize(
    "error",
    [SuggesterError("timed out after 20s"), RuntimeError("bug in a provider")],
)
def test_a_provider_error_is_stored_unresolved_and_goes_to_review(demo_categories, error):
    enquiry = EnquiryFactory()
    suggestion = suggest_category(enquiry, provider=Fixed(error=error))
    assert suggestion.label == "unresolved"
    assert suggestion.validation.startswith("provider error:")
    assert Enquiry.objects.get(pk=enquiry.pk).state == "ready_for_review"


@pytest.mark.django_db
def test_a_retryable_error_can_be_left_to_the_callers_retry(demo_categories):
    enquiry = EnquiryFactory()
    with pytest.raises(SuggesterError):
        suggest_category(enquiry, provider=Fixed(error=SuggesterError("503")), raise_retryable=True)
    assert Suggestion.objects.count() == 0
    assert Enquiry.objects.get(pk=enquiry.pk).state == "validated"


@pytest.mark.django_db
def test_a_suggestion_for_the_current_revision_is_not_asked_twice(demo_categories):
    enquiry = EnquiryFactory(message="My bin was not emptied.")
    first = suggest_category(enquiry)
    provider = Fixed(Answer("website", 0.9))
    assert suggest_category(enquiry, provider=provider) == first
    assert provider.calls == []
    assert Suggestion.objects.count() == 1


@pytest.mark.django_db
def test_a_reviewers_choice_always_wins(demo_categories, make_user):
    from intake.services import revise_enquiry

    enquiry = EnquiryFactory(state="ready_for_review", message="My bin was not emptied.")
    revise_enquiry(
        enquiry.pk,
        actor=make_user("reviewer"),
        reason="it is a repair",
        fields={},
        category="repairs",
    )
    suggestion = suggest_category(enquiry, provider=Fixed(Answer("waste", 0.99)), force=True)

    enquiry.refresh_from_db()
    assert suggestion.label == "waste" and suggestion.validation == "valid"
    assert suggestion.applied_revision is None  # stored and shown, not applied
    assert enquiry.category.slug == "repairs"
    assert enquiry.current_revision == 2


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["approved", "submitted", "confirmed"])
def test_nothing_a_model_says_changes_an_approved_record(demo_categories, state):
    enquiry = EnquiryFactory(state=state)
    suggest_category(enquiry, provider=Fixed(Answer("waste", 0.99)))
    enquiry.refresh_from_db()
    assert (enquiry.state, enquiry.current_revision, enquiry.category) == (state, 1, None)


def test_get_suggester_by_settings(settings):
    assert isinstance(get_suggester(), KeywordSuggester)
    settings.SUGGESTER = "openai"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1/"
    suggester = get_suggester()
    assert isinstance(suggester, OpenAIChatSuggester)
    assert suggester.url == "http://127.0.0.1:9/v1/chat/completions"
    with pytest.raises(ValueError, match="Unknown suggester"):
        get_suggester("magic")


# --- the OpenAI-compatible provider, against a real local chat-completions server -------------


class ChatServer:
    """A tiny HTTP server that speaks /v1/chat/completions, answering what a test queues."""

    def __init__(self):
        self.replies: list[tuple[int, object, float]] = []
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                server.requests.append(
                    {
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                status, content, delay = server.replies.pop(0)
                time.sleep(delay)
                if isinstance(content, str):
                    payload = {"choices": [{"message": {"role": "assistant", "content": content}}]}
                else:
                    payload = content
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the timeout test)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def reply(self, content, status=200, delay=0.0):
        self.replies.append((status, content, delay))


@pytest.fixture
def chat_server():
    server = ChatServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()
    server.thread.join(timeout=10)
    assert not server.thread.is_alive(), "the chat server did not stop within 10s"


def openai(chat_server, **kwargs):
    return OpenAIChatSuggester(
        base_url=chat_server.url, model="tiny-llm", api_key="k", timeout=5, **kwargs
    )


def test_openai_sends_a_versioned_prompt_and_reads_json(chat_server):
    chat_server.reply('{"label": "repairs", "confidence": 0.82, "explanation": "A leak."}')
    answer = openai(chat_server).suggest("There is a leak.", CANDIDATES)

    assert answer == Answer(
        "repairs",
        0.82,
        '{"label": "repairs", "confidence": 0.82, "explanation": "A leak."}',
        "A leak.",
    )
    sent = chat_server.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["auth"] == "Bearer k"
    assert sent["body"]["model"] == "tiny-llm"
    assert sent["body"]["temperature"] == 0
    system, user = sent["body"]["messages"]
    assert "- repairs: Repairs" in system["content"]
    assert "unresolved" in system["content"]
    assert user == {"role": "user", "content": "There is a leak."}


@pytest.mark.parametrize(
    ("content", "label", "confidence"),
    [
        ('```json\n{"label": "waste", "confidence": 0.7}\n```', "waste", 0.7),
        ('{"label": "unresolved", "confidence": 0.2}', None, 0.2),
        ("waste", "waste", None),
        ("I think it is about bins.", "I think it is about bins.", None),
        ('{"label": 42}', "42", None),
    ],
)
def test_openai_reads_replies_leniently_and_leaves_judgement_to_validation(
    chat_server, content, label, confidence
):
    chat_server.reply(content)
    answer = openai(chat_server).suggest("text", CANDIDATES)
    assert (answer.label, answer.confidence) == (label, confidence)
    assert answer.raw_output == content


@pytest.mark.parametrize(
    ("status", "content", "delay", "retryable"),
    [
        (503, {"error": "loading model"}, 0, True),
        (400, {"error": "bad model"}, 0, False),
        (200, {"unexpected": True}, 0, False),
        (200, "x", 2.0, True),  # slower than the timeout
    ],
    ids=["503", "400", "no-choices", "timeout"],
)
def test_openai_failures_are_suggester_errors(chat_server, status, content, delay, retryable):
    chat_server.reply(content, status=status, delay=delay)
    suggester = OpenAIChatSuggester(base_url=chat_server.url, model="m", timeout=0.5)
    with pytest.raises(SuggesterError) as caught:
        suggester.suggest("text", CANDIDATES)
    assert caught.value.retryable is retryable


def test_an_openai_reply_past_its_size_is_refused_before_it_is_held(chat_server):
    chat_server.reply("x" * (2 * 1024 * 1024))
    with pytest.raises(SuggesterError, match="larger than 1 MB") as caught:
        openai(chat_server).suggest("text", CANDIDATES)
    assert caught.value.retryable is False


def test_an_openai_reply_nested_past_the_parser_is_free_text_never_a_crash(chat_server):
    chat_server.reply("[" * 100_000)
    answer = openai(chat_server).suggest("text", CANDIDATES)
    assert answer.label == "[" * 200 and answer.confidence is None


def test_openai_connection_refused_is_retryable():
    suggester = OpenAIChatSuggester(base_url="http://127.0.0.1:9/v1", model="m", timeout=1)
    with pytest.raises(SuggesterError) as caught:
        suggester.suggest("text", CANDIDATES)
    assert caught.value.retryable


def test_openai_transport_is_injectable():
    seen = []

    def transport(url, payload, headers, timeout):
        seen.append((url, timeout, headers))
        return {"choices": [{"message": {"content": '{"label": "waste"}'}}]}

    suggester = OpenAIChatSuggester(
        base_url="http://llm.internal/v1", model="m", timeout=3, transport=transport
    )
    assert suggester.suggest("bins", CANDIDATES).label == "waste"
    assert seen == [("http://llm.internal/v1/chat/completions", 3, {})]


@pytest.mark.django_db
def test_openai_end_to_end_retired_label_ends_unresolved(chat_server, demo_categories, settings):
    settings.SUGGESTER = "openai"
    settings.OPENAI_BASE_URL = chat_server.url
    settings.OPENAI_MODEL = "tiny-llm"
    chat_server.reply('{"label": "parking", "confidence": 0.97, "explanation": "Permits."}')
    enquiry = EnquiryFactory(message="Resident parking permit renewal")

    suggestion = suggest_category(enquiry)

    enquiry.refresh_from_db()
    assert (suggestion.provider, suggestion.model, suggestion.prompt_version) == (
        "openai",
        "tiny-llm",
        "category-v1",
    )
    assert suggestion.label == "unresolved"
    assert suggestion.confidence == 0.97
    assert suggestion.explanation == "Permits."
    assert "parking" in suggestion.raw_output
    assert enquiry.category is None and enquiry.state == "ready_for_review"
    row = JournalEntry.objects.filter(subject_type="intake.enquiry").last()
    assert row.actor == "model:openai/tiny-llm@category-v1"


def test_the_keyword_suggester_compiles_each_keyword_once_not_per_enquiry():
    from intake.suggesters.keywords import _pattern

    _pattern.cache_clear()
    words = tuple(f"word{i}" for i in range(200))
    candidates = [Candidate("waste", "Waste", keywords=words)]
    for _ in range(20):
        KeywordSuggester().suggest("my bin was not emptied", candidates)
    assert _pattern.cache_info().misses == len(words)
