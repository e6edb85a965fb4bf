"""One enqueue/claim/submit cycle through a client generated from the
daemon's OpenAPI document by openapi-python-client, used as generated:
every call below is a generated function, every body a generated model,
every answer parsed by the generated code (which raises on a field the
document promised and the answer lacks).

Environment: TESSERA_URL, REQUESTER_KEY, WORKER_KEY, NAMESPACE, SURFACE;
the generated package `tessera_client` on PYTHONPATH.
"""

import base64
import os

from tessera_client import AuthenticatedClient
from tessera_client.api.default import (
    get_v1_nouns_namespace_store_key,
    get_v1_tasks_id,
    get_v1_tasks_id_receipts,
    get_v1_worker_prompt,
    post_v1_queues_queue_claim,
    post_v1_tasks,
    post_v1_tasks_id_submit,
    post_v1_worker_heartbeat,
    put_v1_nouns_namespace_store_key,
)
from tessera_client.models import (
    Claimed,
    ClaimNext,
    Enqueued,
    Prompt,
    PutNoun,
    PutNounReply,
    ReceiptList,
    SubmitBody,
    Submitted,
    TaskSpec,
    TaskView,
    WorkerHeartbeat,
)
from tessera_client.types import File

url = os.environ["TESSERA_URL"]
ns = os.environ["NAMESPACE"]


def client(key):
    return AuthenticatedClient(base_url=url, token=key, raise_on_unexpected_status=True)


def answer(reply, status, kind):
    assert reply.status_code == status, (reply.status_code, reply.content)
    assert isinstance(reply.parsed, kind), (type(reply.parsed), reply.content)
    return reply.parsed


requester = client(os.environ["REQUESTER_KEY"])
worker = client(os.environ["WORKER_KEY"])

note = "# Notes\n\nnot JSON: bytes of their own type\n"
put = put_v1_nouns_namespace_store_key.sync_detailed(
    ns, "work.inputs", "notes", client=requester,
    body=PutNoun.from_dict({
        "expected_version": 0,
        "body_base64": base64.b64encode(note.encode()).decode(),
        "media_type": "text/markdown",
    }),
)
written = answer(put, 201, PutNounReply)
read = get_v1_nouns_namespace_store_key.sync_detailed(
    ns, "work.inputs", "notes", client=requester, version=written.version,
)
assert read.status_code == 200, read.content
assert isinstance(read.parsed, File), type(read.parsed)
assert read.parsed.payload.read().decode() == note

spec = TaskSpec.from_dict({
    "namespace": ns,
    "queue": "work.external",
    "kind": "verb.solve_draft",
    "effect_class": "write-internal",
    "producer_surface": os.environ["SURFACE"],
    "brief": {"goal": "a cycle from a generated client"},
})
enqueued = answer(post_v1_tasks.sync_detailed(client=requester, body=spec), 201, Enqueued)

claim = post_v1_queues_queue_claim.sync_detailed(
    "work.external", client=worker, body=ClaimNext.from_dict({"wait_ms": 1000}),
)
claimed = answer(claim, 200, Claimed)
assert claimed.task.task_id == enqueued.task_id

handle = client(claimed.handle)
prompt = answer(get_v1_worker_prompt.sync_detailed(client=handle), 200, Prompt)
assert prompt.task_id == enqueued.task_id
assert prompt.context.task_metadata.kind == "verb.solve_draft"
answer(post_v1_worker_heartbeat.sync_detailed(client=handle), 200, WorkerHeartbeat)

submit = post_v1_tasks_id_submit.sync_detailed(
    enqueued.task_id, client=worker,
    body=SubmitBody.from_dict({"lease_id": claimed.lease.id, "ok": True, "note": "done"}),
)
answer(submit, 201, Submitted)

task = answer(get_v1_tasks_id.sync_detailed(enqueued.task_id, client=requester), 200, TaskView)
assert task.state == "succeeded", task.state
receipts = answer(
    get_v1_tasks_id_receipts.sync_detailed(enqueued.task_id, client=requester), 200, ReceiptList,
)
assert receipts.receipts[-1].receipt.ok is True
print("cycle ok", enqueued.task_id)
