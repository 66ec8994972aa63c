"""Report a suggester's quality on the labelled set (intake/classifier_eval/labelled.jsonl)."""

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from intake.evaluation import (
    CATEGORIES,
    CONFIDENT,
    LABELLED,
    evaluate,
    file_categories,
    load_labelled,
)
from intake.models import Category
from intake.suggesters import get_suggester


class Command(BaseCommand):
    help = (
        "Run a suggester over a labelled set and report accuracy on what it answered, how often "
        "it abstained and how often it was confidently wrong."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--provider", default=None, help="keywords or openai (default: SUGGESTER)"
        )
        parser.add_argument("--file", default=str(LABELLED), help="labelled JSONL")
        parser.add_argument(
            "--categories",
            default=str(CATEGORIES),
            help="categories JSON (the demo set the labels refer to)",
        )
        parser.add_argument(
            "--from-db",
            action="store_true",
            help="use the categories (and keywords) configured in the admin instead",
        )
        parser.add_argument("--confident", type=float, default=CONFIDENT)
        parser.add_argument("--json", action="store_true", help="print the full report as JSON")

    def handle(self, *args, **options):
        try:
            suggester = get_suggester(options["provider"])
            rows = load_labelled(Path(options["file"]))
        except (ValueError, OSError) as exc:
            raise CommandError(str(exc)) from exc
        if options["from_db"]:
            categories = list(Category.objects.order_by("slug"))
        else:
            categories = file_categories(Path(options["categories"]))
        report = evaluate(
            suggester,
            rows,
            categories,
            min_confidence=settings.SUGGESTER_MIN_CONFIDENCE,
            confident=options["confident"],
        )
        data = report.as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2))
            return
        pct = lambda part, whole: f"{100 * part / whole:.1f}%" if whole else "n/a"  # noqa: E731
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(data["kinds"].items()))
        w = self.stdout.write
        w(f"Suggester {data['provider']} (model {data['model']}, prompt {data['prompt_version']})")
        w(f"  labelled set: {options['file']}")
        w(f"  messages: {data['messages']} ({kinds})")
        w(
            f"  accuracy on answered: {data['correct']}/{data['answered']} "
            f"({pct(data['correct'], data['answered'])})"
        )
        w(
            f"  abstained: {data['abstained']}/{data['messages']} "
            f"({pct(data['abstained'], data['messages'])}); "
            f"{data['correct_abstentions']} of them expected unresolved"
        )
        w(
            f"  confidently wrong (confidence >= {data['confident_threshold']}): "
            f"{data['confidently_wrong']}/{data['messages']} "
            f"({pct(data['confidently_wrong'], data['messages'])})"
            + (f": {', '.join(data['confidently_wrong_ids'])}" if data["confidently_wrong"] else "")
        )
        by_kind = {}
        for o in report.outcomes:
            stats = by_kind.setdefault(o.kind, [0, 0, 0])
            stats[0] += 1
            stats[1] += o.answered
            stats[2] += o.answered and o.label == o.expected
        for kind, (n, answered, correct) in sorted(by_kind.items()):
            w(f"    {kind:<14} {n:>3} messages, {answered:>3} answered, {correct:>3} correct")
