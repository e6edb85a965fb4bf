#!/usr/bin/env python3
"""A Tessera worker in Python, standard library only: a starting point for
agents written in Python.

Two ways in:

  # a key that may claim from a queue: claim, work, submit, until no work is left
  python3 examples/python_worker.py --url http://127.0.0.1:7700 --key "$(cat worker.key)" --queue work.external

  # a handle someone else claimed for you (the `handle` of a claim): that one attempt
  python3 examples/python_worker.py --url http://127.0.0.1:7700 --handle wh-...

The same comes from the environment: TESSERA_URL, TESSERA_KEY, TESSERA_QUEUE,
TESSERA_HANDLE. `--once` stops after one task.

Each task: GET /v1/worker/prompt (what to do, assembled now), do the work
(`do_the_work` below is the part to replace with your agent), stage each
part with POST /v1/worker/artifact?name=..., then POST /v1/worker/submit
with the final body. A failure in the work submits `?ok=false`, so the task
is retried or fails instead of waiting for its lease to lapse. Errors from
the daemon are always {"error": {"code", "message", "details"}}; this
script prints code and message and stops. GET /v1/openapi.json describes
every route.
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request


class ApiError(Exception):
    """An error answer of the daemon: status, code and message."""

    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code


def call(url, method, path, credential, body=None, content_type="application/json"):
    """One request; returns (status, parsed JSON or None). Raises ApiError on 4xx/5xx."""
    data = None
    headers = {"Authorization": f"Bearer {credential}"}
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers["Content-Type"] = content_type
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            err = json.loads(raw)["error"]
            raise ApiError(e.code, err["code"], err["message"]) from None
        except (ValueError, KeyError, TypeError):
            raise ApiError(e.code, "unreadable", raw[:200].decode(errors="replace")) from None


def do_the_work(prompt):
    """The agent's part: read the prompt, produce the parts and the final body.

    Returns (parts, final): parts maps a part name to its text; final is the
    submit body (JSON). Replace this with your model call. Here: a note that
    echoes the directive, plus every part the contract requires.
    """
    task_id = prompt["task_id"]
    directive = prompt.get("prompt", "")
    parts = {"notes.md": f"# Notes for {task_id}\n\nDirective:\n\n{directive}\n"}
    contract = prompt.get("contract") or {}
    for part in contract.get("parts") or []:
        if part.get("required") and part["name"] not in parts:
            parts[part["name"]] = f"{part['name']} for {task_id}\n"
    final = {"task_id": task_id, "parts": sorted(parts), "summary": "done"}
    return parts, final


def work_on(url, handle):
    """Runs one claimed attempt to its receipt; returns the task's new state."""
    _, prompt = call(url, "GET", "/v1/worker/prompt", handle)
    task_id = prompt["task_id"]
    print(f"{task_id}: prompt fetched (attempt {prompt['attempt']})", flush=True)
    try:
        parts, final = do_the_work(prompt)
    except Exception as e:  # the agent failed: say so, so the task is retried or fails now
        print(f"{task_id}: the work failed: {e}", file=sys.stderr, flush=True)
        _, done = call(url, "POST", "/v1/worker/submit?ok=false", handle, {"error": str(e)})
        return task_id, done["state"]
    call(url, "POST", "/v1/worker/heartbeat", handle)
    for name, text in parts.items():
        query = urllib.parse.urlencode({"name": name})
        _, staged = call(url, "POST", f"/v1/worker/artifact?{query}", handle,
                         text.encode(), "application/octet-stream")
        print(f"{task_id}: staged {name} ({staged['size']} bytes, sha256 {staged['sha256'][:12]})",
              flush=True)
    _, done = call(url, "POST", "/v1/worker/submit", handle, final)
    print(f"{task_id}: submitted: {done['state']} (receipt {done['receipt_sha256'][:12]})", flush=True)
    say_why(task_id, done)
    return task_id, done["state"]


def say_why(task_id, done):
    """Prints what the daemon found wrong with a submit: each failed contract
    check (the field, the rule and what was found there), a projection it
    could not write, and the attempts left."""
    for c in done.get("failed_checks") or []:
        where = f" (output {c['output']})" if c.get("output") is not None else ""
        found = f", found {c['found']}" if c.get("found") else ""
        print(f"{task_id}: check {c['name']} failed{where}: {c.get('pointer') or '-'} "
              f"breaks `{c['keyword']}`{found}", flush=True)
    projection = done.get("projection") or {}
    if projection.get("status") in ("skipped", "failed"):
        print(f"{task_id}: projection {projection['status']}: {projection.get('reason')}", flush=True)
    if done.get("attempts_left") is not None:
        print(f"{task_id}: {done['attempts_left']} attempt(s) left", flush=True)


def claim(url, key, queue, wait_ms):
    """The next claim on `queue`, or None when no task is ready within wait_ms."""
    status, claimed = call(url, "POST", f"/v1/queues/{urllib.parse.quote(queue, safe='')}/claim",
                           key, {"wait_ms": wait_ms})
    if status == 204:
        return None
    print(f"{claimed['task']['task_id']}: claimed from {queue}", flush=True)
    return claimed["handle"]


def main():
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=env("TESSERA_URL", "http://127.0.0.1:7700"))
    p.add_argument("--key", default=env("TESSERA_KEY"), help="a key that may claim from --queue")
    p.add_argument("--queue", default=env("TESSERA_QUEUE"), help="the queue to claim from")
    p.add_argument("--handle", default=env("TESSERA_HANDLE"), help="a claimed attempt's wh- handle")
    p.add_argument("--wait-ms", type=int, default=1000, help="how long a claim waits for work")
    p.add_argument("--once", action="store_true", help="stop after one task")
    args = p.parse_args()
    url = args.url.rstrip("/")
    try:
        if args.handle:
            work_on(url, args.handle)
            return 0
        if not (args.key and args.queue):
            p.error("give --handle, or --key and --queue")
        done = 0
        while True:
            handle = claim(url, args.key, args.queue, args.wait_ms)
            if handle is None:
                print(f"no work left on {args.queue} after {done} task(s)", flush=True)
                return 0
            work_on(url, handle)
            done += 1
            if args.once:
                return 0
    except ApiError as e:
        print(f"tessera answered {e}", file=sys.stderr)
        return 1
    except urllib.error.URLError as e:
        print(f"cannot reach {url}: {e.reason}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
