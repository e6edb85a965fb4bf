// The nouns' views of the overview page: the nouns a key may read
// (GET /v1/nouns, with that route's filters and its cursor for paging) and
// one noun: the versions the key may read (GET .../versions), a version's
// pin and its body, fetched by that pin and shown as text, never as markup.
// The API decides what the key sees; nothing here filters for access.

import {
  api,
  errorBox,
  filterForm,
  h,
  hashOf,
  json,
  mono,
  nounHref,
  query,
  request,
  section,
  shortSha,
  table,
  textField,
  time,
} from "/ui/kit.js";

// Nouns a page shows unless the address names a `limit`.
const NOUN_ROWS = 50;

// Bodies larger than this are not fetched to be shown.
const BODY_LIMIT = 1 << 20;

// The list route's filters: [label, query parameter].
const FILTERS = [
  ["Namespace", "namespace"],
  ["Store", "store"],
  ["Seed pack", "source_pack"],
];

const NO_NOUNS = "No nouns this key may read. A key with cas:write adds them (PUT /v1/nouns/…, or tessera import).";

function nounName(n) {
  return n.namespace + "/" + n.store + "/" + n.key;
}

function visibility(v) {
  return v.visibility + (v.allowed_surfaces.length ? " (" + v.allowed_surfaces.join(", ") + ")" : "");
}

// A version's noun type (when it has one) and media type.
function typeOf(v) {
  return v.type ? [v.type, h("span", { class: "muted" }, " · " + v.media_type)] : v.media_type;
}

function quarantined(v) {
  return v.quarantined ? h("span", { class: "badge s-failed" }, "quarantined") : "";
}

// One row a noun, its latest version the key may read (who wrote each
// version is on the noun's own page).
function nounTable(nouns, empty) {
  return table(
    ["Noun", "Latest", "Type", "Size", "Visibility", "Written", "Seed packs"],
    nouns.map((n) => [
      h("a", { href: nounHref(n.namespace, n.store, n.key), "data-noun": nounName(n), class: "mono" }, nounName(n)),
      h("span", {}, "v" + n.latest.version, n.latest.quarantined ? [" ", quarantined(n.latest)] : null),
      typeOf(n.latest),
      String(n.latest.size),
      visibility(n.latest),
      time(n.latest.created_at),
      n.source_packs.length ? n.source_packs.join(", ") : "—",
    ]),
    empty,
  );
}

// Opens a noun by its path (a noun the list does not reach, such as one
// named in a pin from another page).
function openForm() {
  const input = (name, label) =>
    h("label", {}, h("span", {}, label), h("input", { name, required: true, autocomplete: "off", spellcheck: "false" }));
  const form = h(
    "form",
    {
      class: "filters",
      "data-form": "open-noun",
      onsubmit(e) {
        e.preventDefault();
        const d = new FormData(form);
        location.hash = nounHref(d.get("ns").trim(), d.get("store").trim(), d.get("key").trim());
      },
    },
    input("ns", "Namespace"),
    input("store", "Store"),
    input("key", "Key"),
    h("button", { type: "submit" }, "Open"),
  );
  return h(
    "details",
    { class: "open-noun" },
    h("summary", {}, "Open a noun by its path"),
    form,
    h("p", { class: "hint" }, "A task's brief and receipts link the nouns they pin, too."),
  );
}

// `#/nouns?namespace=&store=&source_pack=&limit=&cursor=`: a page of the nouns the key may read.
export function nounsPage(params) {
  const filters = Object.fromEntries(FILTERS.map(([, name]) => [name, params.get(name) || ""]));
  const form = filterForm(
    "/nouns",
    FILTERS.map(([label, name]) => [label, textField(name, params)]),
  );
  return {
    nav: "nouns",
    head: [h("h1", {}, "Nouns"), form, openForm()],
    async body() {
      const cursor = params.get("cursor") || "";
      const limit = params.get("limit") || String(NOUN_ROWS);
      const page = await api("/v1/nouns" + query({ ...filters, limit, cursor }));
      const filtered = Object.values(filters).some(Boolean);
      const first = new URLSearchParams(params);
      first.delete("cursor");
      const next = new URLSearchParams(params);
      next.set("cursor", page.next_cursor || "");
      const empty = cursor ? "No more nouns." : filtered ? "No noun this key may read matches these filters." : NO_NOUNS;
      return [
        nounTable(page.nouns, empty),
        h(
          "p",
          { class: "paging" },
          cursor ? h("a", { href: hashOf("/nouns", first), "data-page": "first" }, "← First page") : null,
          page.next_cursor ? h("a", { href: hashOf("/nouns", next), "data-page": "next" }, "Next page →") : null,
        ),
      ];
    },
  };
}

// A version's body, read by its pin: text and JSON as text, anything else
// (or anything large) described, not shown.
async function nounBody(base, entry) {
  if (entry.size > BODY_LIMIT) {
    return h("p", { class: "empty" }, entry.size + " bytes: too large to show here.");
  }
  const resp = await request(base + "?version=" + entry.version + "&sha256=" + entry.sha256);
  const type = resp.headers.get("content-type") || "";
  if (type.includes("json")) {
    const text = await resp.text();
    try {
      return json(JSON.parse(text));
    } catch (err) {
      return h("pre", { class: "body" }, text);
    }
  }
  if (type.startsWith("text/")) {
    return h("pre", { class: "body" }, await resp.text());
  }
  return h("p", { class: "empty" }, type + ", " + entry.size + " bytes (not shown).");
}

// `#/noun/<ns>/<store>/<key>[?version=N]`: a noun's versions, a version's pin and body.
export function nounPage(ns, store, key, params) {
  return {
    nav: "nouns",
    async body() {
      const base = "/v1/nouns/" + [ns, store, key].map(encodeURIComponent).join("/");
      const ref = await api(base + "/versions");
      const versions = ref.versions;
      const latest = versions[versions.length - 1];
      const wanted = Number(params.get("version")) || latest.version;
      const entry = versions.find((v) => v.version === wanted) || latest;
      const pin = { namespace: ref.namespace, store: ref.store, key: ref.key, version: entry.version, sha256: entry.sha256 };
      const list = hashOf("/nouns", new URLSearchParams({ namespace: ref.namespace, store: ref.store }));
      return [
        h("p", { class: "crumb" }, h("a", { href: list }, "← Nouns in " + ref.namespace + "/" + ref.store)),
        h("h1", {}, "Noun ", h("span", { class: "mono" }, nounName(ref))),
        latest.quarantined
          ? h("div", { class: "error" }, h("strong", {}, "quarantined"), " The latest version is readable by admin only.")
          : null,
        section(
          "Versions",
          table(
            ["Version", "sha256", "Size", "Type", "Visibility", "Surface", "Owner", "Seed pack", "Created", "By", ""],
            versions.map((v) => [
              v.version === entry.version
                ? h("strong", { "data-version": v.version }, "v" + v.version)
                : h("a", { href: nounHref(ns, store, key, v.version), "data-version": v.version }, "v" + v.version),
              shortSha(v.sha256),
              String(v.size),
              typeOf(v),
              visibility(v),
              v.producer_surface || "—",
              v.owner ? mono(v.owner) : "—",
              v.source_pack || "—",
              time(v.created_at),
              mono(v.created_by),
              quarantined(v),
            ]),
            "No versions this key may read.",
          ),
        ),
        section("Pin of v" + entry.version, json(pin)),
        section("Body of v" + entry.version, await nounBody(base, entry).catch(errorBox)),
      ];
    },
  };
}
