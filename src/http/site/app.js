// The Tessera overview page: a read-only view of what one key may see.
//
// Every record comes from the JSON API with the operator's key as a bearer
// header; the key is kept in sessionStorage (this tab only). Routes live in
// the address's hash: #/ (queues and tasks), #/tasks?queue=&kind=&state=&namespace=,
// #/task/<id>, #/nouns?namespace=&store=&source_pack=&limit=&cursor=,
// #/noun/<ns>/<store>/<key>[?version=N] (the nouns' views are nouns.js).
// A "key" parameter in the hash (#key=<key>, or #/task/t1?key=<key>) is
// removed from the address at once and taken as the tab's key; when the tab
// already has another key, the page asks first (showing key ids, never
// secrets).
//
// All data is untrusted: the DOM is built with createElement and text
// nodes only, never from HTML strings (see kit.js).

import {
  KEY_ITEM,
  add,
  api,
  ApiError,
  badge,
  currentKey,
  errorBox,
  facts,
  filterForm,
  h,
  hashOf,
  json,
  mono,
  parseHash,
  pinLink,
  section,
  shortSha,
  table,
  taskLink,
  textField,
  time,
  query,
} from "/ui/kit.js";
import { nounPage, nounsPage } from "/ui/nouns.js";

const STATES = ["pending", "queued", "claimed", "parked", "waiting", "succeeded", "failed", "cancelled"];
const PAGE_ROWS = 100;
const OVERVIEW_ROWS = 50;

// ---------------------------------------------------------------- the key

// A key a link offered while the tab had another: held here (never in
// storage, the address or the DOM) until the user takes or declines it.
let offered = null;

// Moves a key given in the address out of the address (and so out of the
// history) before anything else runs. It becomes the tab's key when the
// tab has none (or has this one); otherwise it waits in `offered` for the
// user to say whether it replaces the current one: a link must not
// silently switch whose view this tab shows.
function takeKeyFromAddress() {
  const { path, params } = parseHash(location.hash);
  if (!params.has("key")) {
    return;
  }
  const key = params.get("key").trim();
  params.delete("key");
  history.replaceState(null, "", location.pathname + location.search + hashOf(path, params));
  if (!key) {
    return;
  }
  const current = currentKey();
  if (!current || current === key) {
    sessionStorage.setItem(KEY_ITEM, key);
    offered = null;
  } else {
    offered = key;
  }
}

// A secret is tsk_<key id>_<secret hex>: the id is safe to show.
function keyId(key) {
  const m = /^tsk_([A-Za-z0-9]+)_[0-9a-f]+$/.exec(key);
  return m ? m[1] : null;
}

// How the page names a key: its id, never its secret.
function keyName(key) {
  const id = keyId(key);
  return id ? ["key ", mono(id)] : ["a key of ", h("em", {}, "unrecognised format")];
}

// ---------------------------------------------------------------- tasks

// Up to `want` tasks matching the filters, following the API's cursor;
// the namespace filter is applied here (the list route has none).
async function findTasks(filters, want, cursor) {
  const rows = [];
  let next = cursor || "";
  for (let pages = 0; pages < 10; pages++) {
    const page = await api(
      "/v1/tasks" + query({ queue: filters.queue, kind: filters.kind, state: filters.state, cursor: next, limit: "500" }),
    );
    for (const t of page.tasks) {
      if (!filters.namespace || t.namespace === filters.namespace) {
        rows.push(t);
      }
    }
    next = page.next_cursor || "";
    if (!next || rows.length >= want) {
      break;
    }
  }
  const shown = rows.slice(0, want);
  const more = rows.length > want ? shown[shown.length - 1].task_id : next;
  return { tasks: shown, next: more };
}

// ---------------------------------------------------------------- views

// What a brief says in one line: its directive, else its JSON, cut short.
function briefLine(brief) {
  const text = brief && typeof brief.directive === "string" ? brief.directive : JSON.stringify(brief);
  return text.length > 90 ? text.slice(0, 89) + "…" : text;
}

function taskTable(tasks, empty) {
  return table(
    ["Task", "State", "Queue", "Kind", "Namespace", "Attempt", "Visibility", "Brief", "Updated"],
    tasks.map((t) => [
      taskLink(t.task_id),
      badge(t.state),
      t.queue,
      t.kind,
      t.namespace,
      t.attempt + " / " + t.max_attempts,
      t.visibility_scope,
      h("span", { class: "brief" }, briefLine(t.brief)),
      time(t.updated_at),
    ]),
    empty,
  );
}

function queueTable(queues) {
  const rows = queues.map((q) => {
    const total = STATES.reduce((n, s) => n + (q.counts[s] || 0), 0);
    return [
      h("a", { href: hashOf("/tasks", new URLSearchParams({ queue: q.name })) }, q.name),
      q.server ? h("span", { class: "tag" }, "server") : "",
      ...STATES.map((s) => {
        const n = q.counts[s] || 0;
        return n === 0
          ? h("span", { class: "zero" }, "0")
          : h("a", { href: hashOf("/tasks", new URLSearchParams({ queue: q.name, state: s })) }, String(n));
      }),
      String(total),
    ];
  });
  return table(
    ["Queue", "", ...STATES, "total"],
    rows,
    "This key was issued no queues. An admin provisions queues (POST /v1/queues) and names them in a key's grants.",
  );
}

const NO_TASKS = "No tasks this key may see. A key with verbs:enqueue adds them (POST /v1/tasks, or tessera import).";

function overviewPage() {
  return {
    nav: "overview",
    async body() {
      const [queues, page] = await Promise.all([api("/v1/queues"), findTasks({}, OVERVIEW_ROWS)]);
      return [
        section("Queues", queueTable(queues.queues)),
        section(
          "Tasks",
          taskTable(page.tasks, NO_TASKS),
          page.next ? h("p", {}, h("a", { href: "#/tasks" }, "All tasks →")) : null,
        ),
      ];
    },
  };
}

function tasksPage(params) {
  const filters = {
    queue: params.get("queue") || "",
    kind: params.get("kind") || "",
    state: params.get("state") || "",
    namespace: params.get("namespace") || "",
  };
  const state = h(
    "select",
    { name: "state" },
    h("option", { value: "" }, "any"),
    STATES.map((s) => h("option", { value: s, selected: s === filters.state }, s)),
  );
  const form = filterForm("/tasks", [
    ["Queue", textField("queue", params)],
    ["Kind", textField("kind", params)],
    ["State", state],
    ["Namespace", textField("namespace", params)],
  ]);
  return {
    nav: "tasks",
    head: [h("h1", {}, "Tasks"), form],
    async body() {
      const page = await findTasks(filters, PAGE_ROWS, params.get("cursor"));
      const filtered = Object.values(filters).some(Boolean);
      const next = new URLSearchParams(params);
      next.set("cursor", page.next);
      return [
        taskTable(page.tasks, filtered ? "No task this key may see matches these filters." : NO_TASKS),
        page.next ? h("p", {}, h("a", { href: hashOf("/tasks", next) }, "Next page →")) : null,
      ];
    },
  };
}

// Pins found anywhere in a brief: objects with store, key, version, sha256.
function pinsIn(value, path, out) {
  if (value && typeof value === "object") {
    if (typeof value.store === "string" && typeof value.key === "string" && value.version && value.sha256) {
      out.push([path, value]);
    } else {
      for (const [k, v] of Object.entries(value)) {
        pinsIn(v, path ? path + "." + k : k, out);
      }
    }
  }
  return out;
}

function related(r) {
  return h("span", {}, taskLink(r.task_id), " ", r.state ? badge(r.state) : null, r.ok === false ? " not ok" : "");
}

// The task among its family: parent, itself, its children; upstream beside.
function familyTree(t) {
  const self = h("li", {}, h("strong", { class: "mono" }, t.task_id), " ", badge(t.state), " (this task)");
  if (t.children.length > 0) {
    add(self, [h("ul", {}, t.children.map((c) => h("li", {}, related(c))))]);
  }
  let tree = h("ul", { class: "tree" }, self);
  if (t.parent) {
    tree = h("ul", { class: "tree" }, h("li", {}, taskLink(t.parent), " (parent)", tree));
  }
  const parts = [tree];
  if (t.upstream.length > 0) {
    parts.push(h("p", { class: "label" }, "Depends on"), h("ul", { class: "tree" }, t.upstream.map((u) => h("li", {}, related(u)))));
  }
  return parts;
}

function receiptCard(entry, index, previous) {
  const r = entry.receipt;
  const chained = (r.prev || null) === (previous || null);
  const card = h(
    "div",
    { class: "receipt" },
    h(
      "div",
      { class: "receipt-head" },
      h("strong", {}, "#" + (index + 1)),
      " attempt " + r.attempt + " ",
      badge(r.state),
      r.ok ? h("span", { class: "ok" }, " ok") : h("span", { class: "notok" }, " not ok"),
      " · ",
      time(r.at),
      " · by ",
      mono(r.by_key),
    ),
    facts([
      ["sha256", mono(entry.sha256)],
      ["prev", r.prev ? h("span", {}, shortSha(r.prev), chained ? " ✓ chained" : h("span", { class: "notok" }, " ✗ not the previous receipt")) : "—"],
      ["note", r.note],
      ["step", r.step],
      ["failure", r.failure],
      ["outputs", r.outputs.length ? r.outputs.map((p) => [pinLink(p), " "]) : null],
      ["evidence", r.evidence.length ? r.evidence.map((p) => [pinLink(p), " "]) : null],
      ["final body", r.out ? h("span", {}, shortSha(r.out.sha256), " (" + r.out.size + " bytes)") : null],
      ["parts", r.parts ? Object.entries(r.parts).map(([n, sha]) => h("span", { class: "part" }, mono(n), " ", shortSha(sha))) : null],
      [
        "projection",
        r.projection
          ? h("span", {}, r.projection.status + " → ", mono(r.projection.path), r.projection.reason ? " (" + r.projection.reason + ")" : "")
          : null,
      ],
    ]),
  );
  if (r.checks && r.checks.length > 0) {
    add(card, [
      table(
        ["Check", "", "Detail"],
        r.checks.map((c) => [mono(c.name), c.ok ? h("span", { class: "ok" }, "ok") : h("span", { class: "notok" }, "failed"), c.detail]),
        "",
      ),
    ]);
  }
  return card;
}

function outputView(output) {
  const show = (v) => (typeof v === "string" ? h("pre", {}, v) : json(v));
  const parts = Object.entries(output.parts || {});
  return [
    h("p", { class: "label" }, "Final body ", mono("$.out")),
    show(output.out),
    parts.map(([name, v]) => [h("p", { class: "label" }, "Part ", mono(name), " ", mono('$.parts["' + name + '"]')), show(v)]),
  ];
}

function taskPage(id) {
  return {
    nav: "tasks",
    async body() {
      const path = "/v1/tasks/" + encodeURIComponent(id);
      const t = await api(path);
      const [receipts, output] = await Promise.all([
        t.receipts.length ? api(path + "/receipts") : { receipts: [] },
        t.receipts.length ? api(path + "/output").catch((err) => err) : null,
      ]);
      const latest = receipts.receipts.length ? receipts.receipts[receipts.receipts.length - 1].receipt : null;
      const pins = pinsIn(t.brief, "", []);
      const lease = t.lease
        ? facts([
            ["holder", mono(t.lease.holder)],
            ["fence", String(t.lease.fence)],
            ["expires", time(t.lease.expires_at)],
            ["lease id", t.lease.id ? mono(t.lease.id) : null],
          ])
        : h("p", { class: "empty" }, "No live lease: the task is not claimed.");
      return [
        h("h1", {}, "Task ", h("span", { class: "mono" }, t.task_id), " ", badge(t.state)),
        h(
          "div",
          { class: "grid" },
          section(
            "Spec",
            facts([
              // null when this key was not issued the queue: left out.
              ["queue", t.queue && h("a", { href: hashOf("/tasks", new URLSearchParams({ queue: t.queue })) }, t.queue)],
              ["kind", t.kind],
              ["namespace", t.namespace],
              ["effect class", t.effect_class],
              ["visibility", t.visibility_scope],
              ["producer surface", t.producer_surface],
              ["allowed surfaces", t.allowed_surfaces],
              ["priority", String(t.priority)],
              ["tags", t.tags],
              ["cohorts", t.target_cohorts],
              ["on upstream failure", t.on_upstream_failure],
              ["lease length", t.lease_ttl_s == null ? null : t.lease_ttl_s + " s"],
              ["max attempts", t.max_attempts_override == null ? null : String(t.max_attempts_override)],
              ["check policy", t.check_policy],
              ["@file: submits", t.allow_file_submit ? "allowed" : null],
              ["placement", t.placement && mono(t.placement)],
              ["requester", mono(t.requester)],
              ["idempotency key", t.idempotency_key],
              ["created", time(t.created_at)],
              ["updated", time(t.updated_at)],
              ["not before", t.not_before ? time(t.not_before) : null],
              ["reason", t.reason],
            ]),
          ),
          section(
            "Attempts and lease",
            facts([["attempt", t.attempt + " of " + t.max_attempts]]),
            lease,
            t.park ? [h("p", { class: "label" }, "Parked"), json(t.park)] : null,
          ),
          section("Family", familyTree(t)),
        ),
        section(
          "Brief",
          pins.length ? facts(pins.map(([p, pin]) => [p, pinLink(pin, t.namespace)])) : null,
          json(t.brief),
        ),
        section(
          "Receipts",
          receipts.receipts.length
            ? receipts.receipts.map((e, i) => receiptCard(e, i, i > 0 ? receipts.receipts[i - 1].sha256 : null))
            : h("p", { class: "empty" }, "No receipts yet: one is written when a worker submits an attempt."),
        ),
        section(
          "Output",
          latest && latest.projection
            ? latest.projection.status === "written"
              ? h("p", {}, "Projected to ", mono(latest.projection.path))
              : h("p", {}, "Not projected to ", mono(latest.projection.path), " (" + latest.projection.status + ": " + (latest.projection.reason || "no reason given") + ")")
            : null,
          t.state === "claimed" && Object.keys(t.staged).length
            ? facts(Object.entries(t.staged).map(([n, sha]) => ["staged " + n, shortSha(sha)]))
            : null,
          output === null
            ? h("p", { class: "empty" }, "No output yet.")
            : output instanceof ApiError
              ? h("p", { class: "empty" }, "No output to show (" + output.code + ": " + output.message + ").")
              : outputView(output),
        ),
      ];
    },
  };
}

function notFoundPage(path) {
  return {
    nav: "",
    async body() {
      return h("p", { class: "empty" }, "No page at ", mono(path), ". ", h("a", { href: "#/" }, "Back to the overview."));
    },
  };
}

function pageFor(path, params) {
  let m;
  if (path === "/" || path === "" || path === "/queues") {
    return overviewPage();
  }
  if (path === "/tasks") {
    return tasksPage(params);
  }
  if ((m = /^\/task\/([^/]+)$/.exec(path))) {
    return taskPage(decodeURIComponent(m[1]));
  }
  if (path === "/nouns") {
    return nounsPage(params);
  }
  if ((m = /^\/noun\/([^/]+)\/([^/]+)\/([^/]+)$/.exec(path))) {
    const [ns, store, key] = m.slice(1).map(decodeURIComponent);
    return nounPage(ns, store, key, params);
  }
  return notFoundPage(path);
}

// ---------------------------------------------------------------- the shell

const main = document.getElementById("main");
let page = null;
let holder = null;
let generation = 0;
let refreshing = false;
let refreshAgain = false;
let worker = null;
let workerKey = "";
let pollTimer = null;

async function fill(gen) {
  let content;
  try {
    content = await page.body();
  } catch (err) {
    content = errorBox(err);
  }
  if (gen === generation) {
    holder.replaceChildren(...[content].flat(Infinity).filter(Boolean));
    document.body.dataset.loaded = "true";
  }
}

function route() {
  const key = currentKey();
  showKey(key);
  if (offered !== null) {
    askToReplace(key);
    return;
  }
  if (!key) {
    keyBox();
    return;
  }
  const { path, params } = parseHash(location.hash);
  page = pageFor(path, params);
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("here", a.dataset.nav === page.nav);
  }
  holder = h("div", { class: "content" }, h("p", { class: "loading" }, "Loading…"));
  main.replaceChildren(...[page.head || []].flat(), holder);
  generation += 1;
  document.body.dataset.loaded = "false";
  fill(generation);
  startLive(key);
}

// Re-reads the current view in place: one read at a time, and changes that
// arrive meanwhile make one more read a second later.
async function refresh() {
  if (!page || !holder) {
    return;
  }
  if (refreshing) {
    refreshAgain = true;
    return;
  }
  refreshing = true;
  await fill(generation);
  refreshing = false;
  if (refreshAgain) {
    refreshAgain = false;
    setTimeout(refresh, 1000);
  }
}

function showKey(key) {
  const who = document.getElementById("who");
  const forget = document.getElementById("forget");
  who.replaceChildren();
  forget.hidden = !key;
  if (key) {
    const id = keyId(key);
    add(who, ["key ", id ? mono(id) : h("em", {}, "unrecognised format")]);
  }
}

// Asks whether the key a link offered replaces the tab's `current` one.
// Keeping the current key is the default (it has the focus).
function askToReplace(current) {
  page = null;
  holder = null;
  const answer = (replace) => {
    if (replace) {
      sessionStorage.setItem(KEY_ITEM, offered);
    }
    offered = null;
    route();
  };
  const keep = h("button", { type: "button", "data-answer": "keep", onclick: () => answer(false) }, "Keep ", keyName(current));
  const replace = h("button", { type: "button", "data-answer": "replace", onclick: () => answer(true) }, "Use ", keyName(offered));
  const box = h(
    "section",
    { class: "keybox", "data-ask": "replace-key" },
    h("h1", {}, "Replace this tab's key?"),
    h("p", {}, "The link you opened carries ", keyName(offered), ". This tab uses ", keyName(current), "."),
    h("p", {}, "Replacing it makes this tab show what the other key may see. Keep the current key unless you meant to switch."),
    h("div", { class: "row" }, keep, replace),
  );
  main.replaceChildren(box);
  document.body.dataset.loaded = "true";
  keep.focus();
}

function keyBox() {
  const field = h("input", {
    type: "password",
    name: "key",
    placeholder: "tsk_…",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    "aria-label": "API key",
  });
  const form = h(
    "form",
    {
      class: "keybox",
      onsubmit(e) {
        e.preventDefault();
        const key = field.value.trim();
        if (key) {
          sessionStorage.setItem(KEY_ITEM, key);
          route();
        }
      },
    },
    h("h1", {}, "Tessera overview"),
    h(
      "p",
      {},
      "Paste an API key. The page shows exactly what that key may see, read-only. ",
      "The key stays in this tab (sessionStorage) and is sent only to this daemon.",
    ),
    h("div", { class: "row" }, field, h("button", { type: "submit" }, "Use key")),
    h("p", { class: "hint" }, "The admin key of a new root is in ", mono("<root>/auth/admin.key"), "."),
  );
  main.replaceChildren(form);
  setMode(null);
  document.body.dataset.loaded = "true";
  field.focus();
}

function setMode(mode, detail) {
  const el = document.getElementById("live");
  el.hidden = !mode;
  el.className = "live" + (mode ? " mode-" + mode : "");
  el.textContent = mode || "";
  el.title = detail || (mode === "live" ? "updates arrive from /v1/events" : "");
}

function startPolling(detail) {
  setMode("polling", detail);
  if (pollTimer === null) {
    pollTimer = setInterval(refresh, 3000);
  }
}

// Live updates come from a worker reading /v1/events (see live.js), or
// from its 3 s timer when the daemon has no events route.
function startLive(key) {
  if (worker && workerKey === key) {
    return;
  }
  stopLive();
  workerKey = key;
  setMode("connecting", "opening /v1/events");
  try {
    worker = new Worker("/ui/live.js", { type: "module" });
  } catch (err) {
    startPolling("this browser cannot run the live worker; refreshing every 3 s");
    return;
  }
  worker.onmessage = (e) => {
    if (e.data.type === "mode") {
      setMode(e.data.mode, e.data.detail);
    } else if (e.data.type === "change") {
      refresh();
    }
  };
  worker.onerror = () => startPolling("the live worker failed; refreshing every 3 s");
  worker.postMessage({ type: "start", key });
}

function stopLive() {
  if (worker) {
    worker.terminate();
    worker = null;
  }
  if (pollTimer !== null) {
    clearInterval(pollTimer);
    pollTimer = null;
  }
}

function forgetKey() {
  sessionStorage.removeItem(KEY_ITEM);
  offered = null;
  stopLive();
  page = null;
  holder = null;
  route();
}

takeKeyFromAddress();
document.getElementById("forget").addEventListener("click", forgetKey);
window.addEventListener("hashchange", () => {
  takeKeyFromAddress();
  route();
});
route();
