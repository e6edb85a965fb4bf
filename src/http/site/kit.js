// What every view of the overview page builds with: the address's hash
// routes, the tab's key, DOM helpers that make text nodes of all data, and
// the JSON API client (the key as a bearer header, errors as ApiError).
//
// All data is untrusted: the DOM is built with createElement and text
// nodes only, never from HTML strings.

// Where the tab keeps its key (sessionStorage: this tab only).
export const KEY_ITEM = "tessera.key";

// ---------------------------------------------------------------- routes

export function parseHash(hash) {
  const text = hash.replace(/^#/, "");
  const q = text.indexOf("?");
  if (!text.startsWith("/")) {
    return { path: "/", params: new URLSearchParams(text) };
  }
  return {
    path: q < 0 ? text : text.slice(0, q),
    params: new URLSearchParams(q < 0 ? "" : text.slice(q + 1)),
  };
}

export function hashOf(path, params) {
  const rest = params.toString();
  return "#" + path + (rest ? "?" + rest : "");
}

// ---------------------------------------------------------------- the key

export function currentKey() {
  return sessionStorage.getItem(KEY_ITEM) || "";
}

// ---------------------------------------------------------------- DOM

// h("a", {href: "#/"}, "text", child, [more]): strings become text nodes.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) {
      continue;
    }
    if (name.startsWith("on")) {
      el.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      el.className = value;
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  add(el, children);
  return el;
}

export function add(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c !== null && c !== undefined && c !== false) {
      el.append(c instanceof Node ? c : String(c));
    }
  }
}

export function badge(state) {
  return h("span", { class: "badge s-" + state }, state);
}

export function mono(text) {
  return h("code", {}, text);
}

export function shortSha(sha) {
  return h("code", { title: sha }, String(sha).slice(0, 12) + "…");
}

export function taskLink(id) {
  return h("a", { href: "#/task/" + encodeURIComponent(id), "data-task-id": id, class: "mono" }, id);
}

export function nounHref(ns, store, key, version) {
  const path = "/noun/" + [ns, store, key].map(encodeURIComponent).join("/");
  return hashOf(path, new URLSearchParams(version ? { version: String(version) } : {}));
}

export function pinLink(pin, namespace) {
  const ns = pin.namespace || namespace;
  return h(
    "a",
    { href: nounHref(ns, pin.store, pin.key, pin.version), class: "mono" },
    ns + "/" + pin.store + "/" + pin.key + " v" + pin.version,
  );
}

export function time(iso) {
  if (!iso) {
    return "—";
  }
  return h("time", { datetime: iso, title: iso }, String(iso).replace("T", " ").replace(/\.\d+/, ""));
}

export function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

// A definition list from [label, value] pairs, skipping empty values.
export function facts(pairs) {
  const dl = h("dl", { class: "facts" });
  for (const [label, value] of pairs) {
    if (value === null || value === undefined || value === "" || (Array.isArray(value) && value.length === 0)) {
      continue;
    }
    const list = Array.isArray(value) && value.every((v) => typeof v === "string");
    add(dl, [h("dt", {}, label), h("dd", {}, list ? value.join(", ") : value)]);
  }
  return dl;
}

export function table(columns, rows, empty) {
  if (rows.length === 0) {
    return h("p", { class: "empty" }, empty);
  }
  return h(
    "div",
    { class: "scroll" },
    h(
      "table",
      {},
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
      h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c) => h("td", {}, c))))),
    ),
  );
}

export function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), children);
}

export function errorBox(err) {
  const status = err.status ? err.status + " " : "";
  const box = h(
    "div",
    { class: "error", role: "alert" },
    h("strong", {}, status + (err.code || "error")),
    " ",
    err.message || String(err),
  );
  if (err.status === 401) {
    add(box, [h("p", {}, "The daemon refused this key. Use “Forget key” and paste a valid one.")]);
  }
  if (err.details && Object.keys(err.details).length > 0) {
    add(box, [json(err.details)]);
  }
  return box;
}

// A filter form for the list at `path`: its fields are [label, control]
// pairs (controls named as the route's parameters); submitting opens the
// route with the non-empty ones, and "clear" opens it with none.
export function filterForm(path, fields) {
  const form = h(
    "form",
    {
      class: "filters",
      onsubmit(e) {
        e.preventDefault();
        const next = new URLSearchParams();
        for (const [k, v] of new FormData(form)) {
          if (String(v).trim()) {
            next.set(k, String(v).trim());
          }
        }
        location.hash = hashOf(path, next);
      },
    },
    fields.map(([label, control]) => h("label", {}, h("span", {}, label), control)),
    h("button", { type: "submit" }, "Filter"),
    h("a", { href: "#" + path, class: "quiet" }, "clear"),
  );
  return form;
}

// A text field of a filter form, holding the route's current value.
export function textField(name, params) {
  return h("input", { name, value: params.get(name) || "", autocomplete: "off", spellcheck: "false" });
}

// ---------------------------------------------------------------- the API

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export async function request(path) {
  let resp;
  try {
    resp = await fetch(path, {
      headers: { Authorization: "Bearer " + currentKey(), Accept: "application/json" },
      cache: "no-store",
    });
  } catch (err) {
    throw new ApiError(0, "unreachable", "the daemon could not be reached (" + err.message + ")");
  }
  if (!resp.ok) {
    let body = null;
    try {
      body = await resp.json();
    } catch (err) {
      // Not an API error body; the status says enough.
    }
    const e = (body && body.error) || {};
    throw new ApiError(resp.status, e.code || "http_" + resp.status, e.message || resp.statusText, e.details);
  }
  return resp;
}

export async function api(path) {
  return (await request(path)).json();
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v) {
      q.set(k, v);
    }
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

