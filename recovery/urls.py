from django.urls import path

from recovery.operator_actions import ENQUIRY_ACTIONS, OPERATION_ACTIONS
from recovery.views import (
    actions,
    answers,
    bulk,
    dashboard,
    documents,
    integrations,
    items,
    notices,
    queue,
    setup,
    slots,
    wording,
)

app_name = "recovery"


urlpatterns = [
    path("console/", queue.queue, name="queue"),
    path("console/queue-moved/", queue.queue_moved, name="queue-moved"),
    path("console/review/", queue.review_list, name="review"),
    path("console/review/<str:reference>/", items.review_detail, name="review-item"),
    path(
        "console/review/<str:reference>/attach-as-reply/",
        items.attach_as_reply,
        name="review-attach-as-reply",
    ),
    path(
        "console/review/<str:reference>/documents/<int:pk>/correct/",
        documents.correct,
        name="document-correct",
    ),
    path(
        "console/review/<str:reference>/documents/<int:pk>/reprocess/",
        documents.reprocess,
        name="document-reprocess",
    ),
    path("console/enquiries/", queue.enquiry_list, name="enquiries"),
    path("console/enquiries/<str:reference>/", items.enquiry_detail, name="enquiry"),
    path("console/enquiries/<str:reference>/slots/", slots.read_slots, name="enquiry-slots"),
    path(
        "console/enquiries/<str:reference>/slots/card/",
        slots.slots_card,
        name="enquiry-slots-card",
    ),
    path("console/operations/<uuid:op_id>/", items.operation_detail, name="operation"),
    path("console/operations/<uuid:op_id>/card/", items.operation_card, name="op-card"),
    path("console/integrations/", integrations.integration_list, name="integrations"),
    path(
        "console/integrations/<str:name>/settings/",
        integrations.integration_settings,
        name="integration-settings",
    ),
    path("console/integrations/<str:name>/pause/", integrations.pause, name="pause"),
    path("console/integrations/<str:name>/resume/", integrations.resume, name="resume"),
    path("console/integrations/<str:name>/check/", integrations.check, name="check_integration"),
    path("console/integrations/<str:name>/backlog/", integrations.backlog, name="backlog"),
    path("console/integrations/<str:name>/backlog/release/", integrations.release, name="release"),
    path("console/bulk/", bulk.bulk, name="bulk"),
    path("console/bulk/<str:token>/", bulk.bulk_results, name="bulk-results"),
    path("console/operations/<uuid:op_id>/take/", bulk.take_operation, name="op-take"),
    path("console/enquiries/<str:reference>/take/", bulk.take_enquiry, name="enquiry-take"),
    path("console/replies/<uuid:pk>/", answers.answer_detail, name="answer"),
    path("console/replies/<uuid:pk>/attach/", answers.answer_attach, name="answer-attach"),
    path("console/replies/<uuid:pk>/set-aside/", answers.answer_set_aside, name="answer-set-aside"),
    path("console/replies/<uuid:pk>/files/<int:file_id>/", answers.answer_file, name="answer-file"),
    path("console/dashboard/", dashboard.dashboard, name="dashboard"),
    path("console/drill/", dashboard.drill, name="drill"),
    path("console/runbooks/", dashboard.runbook_index, name="runbooks"),
    path("console/messages/", notices.notice_list, name="notices"),
    path("console/messages/<slug:kind>/", wording.template_edit, name="message-template"),
    path(
        "console/enquiries/<str:reference>/preview/<slug:action>/",
        wording.action_preview,
        name="enquiry-preview",
    ),
    path("console/me/", notices.my_notices, name="me"),
    path("console/runbooks/<slug:slug>/", dashboard.runbook, name="runbook"),
    path("metrics", dashboard.metrics, name="metrics"),
    path("console/setup/", setup.setup_page, name="setup"),
    path("console/setup/queues/<str:key>/", setup.policy_edit, name="setup-queue"),
    path("console/setup/categories/new/", setup.category_edit, name="setup-category-new"),
    path("console/setup/categories/<slug:slug>/", setup.category_edit, name="setup-category"),
    path("console/people/", setup.people_page, name="people"),
    path("console/people/<int:pk>/", setup.person_edit, name="person"),
]
urlpatterns += [
    path(
        f"console/operations/<uuid:op_id>/{segment}/",
        actions.operation_action,
        {"action": action},
        name=f"op-{segment}",
    )
    for action, segment in ((a.name, a.segment) for a in OPERATION_ACTIONS.values())
]
urlpatterns += [
    path(
        f"console/enquiries/<str:reference>/{segment}/",
        actions.enquiry_action,
        {"action": action},
        name=f"enquiry-{segment}",
    )
    for action, segment in ((a.name, a.segment) for a in ENQUIRY_ACTIONS.values())
]
