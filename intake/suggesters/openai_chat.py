"""An OpenAI-compatible chat-completions suggester (Ollama, vLLM, llama.cpp, OpenAI itself).

It knows one URL and one model. Its HTTP goes through ``post_json``, a tiny function with a
timeout that turns every failure into SuggesterError; a unit test may pass another transport.
"""

import json
import re
from collections.abc import Callable

import requests

from intake.suggesters.base import Answer, Candidate, SuggesterError

PROMPT_VERSION = "category-v1"
PROMPTS = {
    "category-v1": (
        "You sort enquiries sent to a public service into one category.\n"
        "Categories (slug: name - description):\n{categories}\n\n"
        "Answer with one JSON object and nothing else:\n"
        '{{"label": "<one slug from the list, or unresolved>", '
        '"confidence": <a number from 0 to 1>, "explanation": "<one short sentence>"}}\n'
        "Use unresolved when the message fits no category, or several equally, or contradicts "
        "itself. Never invent a slug."
    ),
}
MAX_RAW = 4000
_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)

Transport = Callable[[str, dict, dict, float], dict]


# A chat completion of one short JSON object: an answer larger than this is not one.
MAX_REPLY_BYTES = 1024 * 1024


def post_json(url: str, payload: dict, headers: dict, timeout: float) -> dict:
    try:
        with requests.post(
            url, json=payload, headers=headers, timeout=timeout, stream=True
        ) as response:
            content = _bounded(response)
    except requests.Timeout as exc:
        raise SuggesterError(f"timed out after {timeout}s: {exc.__class__.__name__}") from exc
    except requests.RequestException as exc:
        raise SuggesterError(f"request failed: {exc.__class__.__name__}") from exc
    text = content.decode("utf-8", errors="replace")
    if response.status_code >= 500 or response.status_code == 429:
        raise SuggesterError(f"HTTP {response.status_code}")
    if response.status_code >= 400:
        raise SuggesterError(f"HTTP {response.status_code}: {text[:200]}", retryable=False)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SuggesterError("the reply was not JSON", retryable=False) from exc


def _bounded(response) -> bytes:
    """The reply's body, decompressed a chunk at a time (urllib3 bounds each chunk's
    decompression), refused past MAX_REPLY_BYTES before more is held."""
    body = bytearray()
    for chunk in response.iter_content(64 * 1024):
        if len(body) + len(chunk) > MAX_REPLY_BYTES:
            raise SuggesterError(
                f"the reply was larger than {MAX_REPLY_BYTES // (1024 * 1024)} MB", retryable=False
            )
        body += chunk
    return bytes(body)


def render_prompt(candidates: list[Candidate], version: str = PROMPT_VERSION) -> str:
    lines = "\n".join(
        f"- {c.slug}: {c.name}" + (f" - {c.description}" if c.description else "")
        for c in candidates
    )
    return PROMPTS[version].format(categories=lines)


def parse_content(content: str) -> Answer:
    """Read the model's reply leniently; what it means is decided by validation, not here."""
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    raw = content[:MAX_RAW]
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past Python's parser
        data = None
    if isinstance(data, dict):
        label = data.get("label")
        label = label.strip() if isinstance(label, str) else (None if label is None else str(label))
        explanation = data.get("explanation")
        explanation = explanation if isinstance(explanation, str) else ""
        if label in (None, "", "unresolved"):
            return Answer(None, data.get("confidence"), raw, explanation or "The model abstained.")
        return Answer(label, data.get("confidence"), raw, explanation[:1000])
    # Free text: kept as the label so validation can say exactly what came back.
    return Answer(text[:200] or None, None, raw, "")


class OpenAIChatSuggester:
    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout: float = 20.0,
        prompt_version: str = PROMPT_VERSION,
        transport: Transport | None = None,
    ):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.prompt_version = prompt_version
        self.transport = transport or post_json

    def suggest(self, text: str, candidates: list[Candidate]) -> Answer:
        payload = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": render_prompt(candidates, self.prompt_version)},
                {"role": "user", "content": text},
            ],
        }
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        reply = self.transport(self.url, payload, headers, self.timeout)
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise SuggesterError(
                f"no choices[0].message.content in the reply: {str(reply)[:200]}", retryable=False
            ) from exc
        if not isinstance(content, str):
            raise SuggesterError("the reply's content is not text", retryable=False)
        return parse_content(content)
