//! The overview site in a real browser: a daemon on 127.0.0.1 with a team,
//! tasks and nouns, read by headless Chromium with a scoped key and with
//! the admin key. The rendered DOM must show what each key may see and
//! nothing more, and untrusted text (a brief with markup) must stay text.
//!
//! A link carrying `#key=` must not silently replace the key a tab already
//! holds: the page asks, and keeps the current key unless told otherwise
//! (driven through the DevTools protocol, `cdp.rs`, to press its buttons).
//!
//! The Nouns page lists exactly the nouns the API lists for the key (a
//! scoped key's list leaves out what it may not read), filters and pages
//! them as the API does, and opens one: its versions, pin and body, markup
//! in a body shown as text. At a phone's width (375 px) no page is wider
//! than the screen, its header included.
//!
//! Needs Debian's `chromium` at /usr/bin/chromium (CI installs it). With
//! `TESSERA_UPDATE_SCREENSHOT=1` the tests also refresh the screenshots in
//! `docs/` (`overview.png`, `nouns.png`, `nouns-phone.png`).

#[path = "site/cdp.rs"]
mod cdp;
use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use support::{NS, Team, body, claim, claimed_id, enqueue, lease, put_noun, spec, submit};

const CHROMIUM: &str = "/usr/bin/chromium";

/// Markup a brief may carry: it must be shown as text, never run or parsed.
const UNTRUSTED: &str =
    r#"<script>document.title='pwned'</script><img src=x onerror="document.title='pwned'">"#;

/// A brief only the requester (and admin) may see.
const HIDDEN_BRIEF: &str = "hidden-brief-7f3a";

/// How long one Chromium run may take before it is killed.
const CHROMIUM_LIMIT: Duration = Duration::from_secs(90);

/// The flags every Chromium run of these tests starts with.
const CHROMIUM_FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// Fails with how to install Chromium when it is missing.
fn require_chromium() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: the site test drives a real browser. Install it with \
         `apt-get update && apt-get install -y chromium` (Debian; as root)"
    );
}

/// Runs headless Chromium on `url` with `extra` arguments (`--dump-dom` or
/// `--screenshot=...`) and a fresh profile; returns what it printed. The
/// browser runs in its own process group, killed whole if it overruns.
async fn chromium(url: &str, extra: &[String]) -> String {
    require_chromium();
    let profile = tempfile::tempdir().expect("profile dir");
    let mut cmd = tokio::process::Command::new(CHROMIUM);
    cmd.args(CHROMIUM_FLAGS)
        .arg("--virtual-time-budget=10000")
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd.spawn().expect("start chromium");
    let group = rustix::process::Pid::from_raw(child.id().expect("pid") as i32).expect("pid");
    match tokio::time::timeout(CHROMIUM_LIMIT, child.wait_with_output()).await {
        Ok(out) => {
            let out = out.expect("chromium output");
            assert!(
                out.status.success(),
                "chromium failed ({}) on {url}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).expect("UTF-8 DOM")
        }
        Err(_) => {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            panic!("chromium did not finish {url} within {CHROMIUM_LIMIT:?}");
        }
    }
}

/// The DOM of `page` (a hash route such as `/task/t1`, or empty for the
/// overview) as `key` sees it, once the page has settled.
async fn dom(base: &str, page: &str, key: &str) -> String {
    let hash = if page.is_empty() {
        format!("key={key}")
    } else {
        format!("{page}?key={key}")
    };
    let dom = chromium(&format!("{base}/#{hash}"), &["--dump-dom".into()]).await;
    assert!(
        dom.contains(r#"data-loaded="true""#),
        "the page did not finish loading {page:?}:\n{dom}"
    );
    assert!(!dom.contains(key), "the secret must not stay in the page");
    dom
}

/// A task link in the rendered DOM.
fn shows_task(dom: &str, id: &str) -> bool {
    dom.contains(&format!(r#"data-task-id="{id}""#))
}

/// Untrusted markup shows as escaped text and never becomes elements.
fn markup_stays_text(dom: &str) {
    assert!(
        dom.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;&lt;img src=x onerror="),
        "the brief's markup should be shown as text"
    );
    assert!(!dom.contains("<script>document.title"), "{dom}");
    assert!(
        !dom.contains("<img"),
        "no image element may come from data: {dom}"
    );
    assert!(!dom.contains("<title>pwned"), "{dom}");
}

struct World {
    team: Team,
    base: String,
    viewer_key: String,
    viewer_id: String,
    visible: String,
    hidden: String,
    downstream: String,
    receipt: String,
}

/// A team: the requester enqueues a task with markup in its brief (seen
/// by the worker), a private one (hidden from the worker) and one waiting
/// on the first. The worker finishes the first through the worker routes
/// (a staged part, a final body, a projection) and the second with an
/// output noun, and parks a fourth.
async fn world() -> World {
    let team = Team::start().await;
    let base = team.d.admin.base().to_string();
    let input = put_noun(
        &team.requester,
        "work.inputs",
        "numbers",
        json!({"numbers": [3, 4, 12], "note": UNTRUSTED}),
    )
    .await;
    let brief = json!({"directive": UNTRUSTED, "input_ref": input});
    let visible = enqueue(&team.requester, &spec("verb.solve_draft", brief)).await;
    let mut private = spec("verb.solve_draft", json!({"directive": HIDDEN_BRIEF}));
    private["visibility_scope"] = json!("private");
    let hidden = enqueue(&team.requester, &private).await;
    let mut after = spec("verb.verify_gate", json!({"directive": "check the sum"}));
    after["depends_on"] = json!([visible]);
    let downstream = enqueue(&team.requester, &after).await;

    let c = claim(&team.worker, "work.external")
        .await
        .expect("a task to claim");
    assert_eq!(claimed_id(&c), visible);
    let handle = team.d.admin.with_bearer(c["handle"].as_str().unwrap());
    let r = handle
        .post_bytes(
            "/v1/worker/artifact?name=plan.md",
            "square, then add".as_bytes(),
        )
        .await
        .unwrap();
    assert!(
        r.status.is_success(),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let r = handle
        .post_bytes("/v1/worker/submit", r#"{"sum_of_squares": 169}"#.as_bytes())
        .await
        .unwrap();
    assert!(
        r.status.is_success(),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let receipt = body(&r)["receipt_sha256"].as_str().unwrap().to_string();

    let c = claim(&team.worker, "work.external")
        .await
        .expect("the downstream task");
    assert_eq!(claimed_id(&c), downstream);
    let answer = put_noun(
        &team.worker,
        "work.outputs",
        "answer",
        json!({"verdict": "ok"}),
    )
    .await;
    let r = submit(&team.worker, &downstream, &lease(&c), true, json!([answer])).await;
    assert_status!(r, 201);

    let waiting = enqueue(
        &team.requester,
        &spec("verb.compute", json!({"directive": "the second half"})),
    )
    .await;
    let c = claim(&team.worker, "work.external")
        .await
        .expect("a task to park");
    assert_eq!(claimed_id(&c), waiting);
    let park = json!({"lease_id": lease(&c), "reason": "needs the second half of the list", "needs": {"store": "work.inputs"}});
    let r = team
        .worker
        .post_json(&format!("/v1/tasks/{waiting}/park"), &park)
        .await
        .unwrap();
    assert_status!(r, 200);

    let (viewer_id, viewer_key) = viewer(&team).await;
    World {
        team,
        base,
        viewer_key,
        viewer_id,
        visible,
        hidden,
        downstream,
        receipt,
    }
}

/// A key with the worker's grants, for the browser (the support team's
/// clients do not hand out their secrets): the scoped key of the test.
async fn viewer(team: &Team) -> (String, String) {
    let keys = body(&team.d.admin.get("/v1/keys").await.unwrap());
    let worker = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key_id"] == json!(team.ids["worker"]))
        .expect("the worker key")
        .clone();
    let spec = json!({"label": "site viewer", "grants": worker["grants"]});
    let r = team.d.admin.post_json("/v1/keys", &spec).await.unwrap();
    assert_status!(r, 201);
    let b = body(&r);
    (
        b["key_id"].as_str().unwrap().to_string(),
        b["secret"].as_str().unwrap().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_site_shows_each_key_exactly_what_it_may_see() {
    let w = world().await;
    let admin_key = w.team.d.admin_key.clone();

    // The scoped key: its tasks, never the private one, markup as text.
    let overview = dom(&w.base, "", &w.viewer_key).await;
    assert!(shows_task(&overview, &w.visible), "{overview}");
    assert!(shows_task(&overview, &w.downstream), "{overview}");
    assert!(!shows_task(&overview, &w.hidden), "{overview}");
    assert!(!overview.contains(&format!("#/task/{}\"", w.hidden)));
    assert!(!overview.contains(HIDDEN_BRIEF));
    assert!(overview.contains("work.external"), "the queue is listed");
    assert!(overview.contains(&w.viewer_id), "the header names the key");
    // The worker reading /v1/events runs in real time, outside the
    // browser's virtual clock, so the dump may catch it still connecting.
    assert!(
        ["mode-connecting", "mode-polling", "mode-live"]
            .iter()
            .any(|m| overview.contains(&format!(r#"class="live {m}""#))),
        "the live indicator shows: {overview}"
    );
    markup_stays_text(&overview);

    // Admin: every task, the private one too.
    let overview = dom(&w.base, "", &admin_key).await;
    for id in [&w.visible, &w.hidden, &w.downstream] {
        assert!(shows_task(&overview, id), "admin sees {id}: {overview}");
    }
    assert!(overview.contains(HIDDEN_BRIEF));
    markup_stays_text(&overview);

    // The task page: spec, receipt chain, output pin, projection, family.
    let page = dom(&w.base, &format!("/task/{}", w.visible), &w.viewer_key).await;
    assert!(page.contains(&w.receipt), "the receipt's sha256: {page}");
    assert!(
        page.contains(&format!("{NS}/work.inputs/numbers v1")),
        "the brief's pin: {page}"
    );
    assert!(page.contains("sum_of_squares"), "the final body: {page}");
    assert!(page.contains("square, then add"), "the staged part: {page}");
    assert!(
        page.contains(&format!("tasks/{}/ctx", w.visible)),
        "the projection path: {page}"
    );
    assert!(!shows_task(&page, &w.hidden));
    markup_stays_text(&page);
    let page = dom(&w.base, &format!("/task/{}", w.downstream), &w.viewer_key).await;
    assert!(
        page.contains("Depends on") && shows_task(&page, &w.visible),
        "{page}"
    );
    assert!(
        page.contains(&format!("{NS}/work.outputs/answer v1")),
        "the output pin: {page}"
    );

    // The hidden task by its id: the API's 404, nothing of the task.
    let page = dom(&w.base, &format!("/task/{}", w.hidden), &w.viewer_key).await;
    assert!(page.contains("404 not_found"), "{page}");
    assert!(!page.contains(HIDDEN_BRIEF));
    let page = dom(&w.base, &format!("/task/{}", w.hidden), &admin_key).await;
    assert!(page.contains(HIDDEN_BRIEF), "{page}");

    // The noun page: versions, the pin, the body (markup as text).
    let page = dom(
        &w.base,
        &format!("/noun/{NS}/work.inputs/numbers"),
        &w.viewer_key,
    )
    .await;
    let versions = body(
        &w.team
            .worker
            .get(&format!("/v1/nouns/{NS}/work.inputs/numbers/versions"))
            .await
            .unwrap(),
    );
    let sha = versions["versions"][0]["sha256"].as_str().unwrap();
    assert!(
        page.contains(sha),
        "the version's sha256 in the pin: {page}"
    );
    assert!(page.contains("surface_only"), "{page}");
    assert!(page.contains("&lt;script&gt;document.title"), "{page}");
    assert!(!page.contains("<img"), "{page}");

    // A screenshot of the admin's overview; docs/overview.png on request.
    screenshot(
        &format!("{}/#key={admin_key}", w.base),
        "1280,900",
        "overview.png",
    )
    .await;
}

#[tokio::test]
async fn the_site_files_carry_a_strict_policy_and_revalidate() {
    let d = support::TestDaemon::start().await;
    let anon = d.admin.anonymous();
    for (path, kind) in [
        ("/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/kit.js", "text/javascript"),
        ("/ui/nouns.js", "text/javascript"),
        ("/ui/live.js", "text/javascript"),
        ("/ui/site.css", "text/css"),
    ] {
        let r = anon.get(path).await.unwrap();
        assert_status!(r, 200);
        assert!(
            r.header("content-type").unwrap().starts_with(kind),
            "{path}"
        );
        let csp = r.header("content-security-policy").unwrap();
        assert!(csp.starts_with("default-src 'self'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("cache-control"), Some("no-cache"));
        let etag = r.header("etag").unwrap().to_string();
        let again = anon
            .send(http::Method::GET, path, None, &[("if-none-match", &etag)])
            .await
            .unwrap();
        assert_status!(again, 304);
        assert!(again.body.is_empty());
    }
    let r = anon.get("/ui/secrets.json").await.unwrap();
    assert_status!(r, 404, "no_route");
    let r = anon.get("/v1/tasks").await.unwrap();
    assert_status!(r, 401, "unauthenticated");
}

/// What the page shows of its key: the tab's stored key, the header's key
/// id, whether it is asking, and its whole markup (to look for secrets).
const STATE: &str = "({stored: sessionStorage.getItem('tessera.key'), \
    who: document.getElementById('who').textContent, \
    asking: document.querySelector('[data-ask=\"replace-key\"]')?.textContent ?? null, \
    hash: location.hash, html: document.documentElement.outerHTML})";

/// The page has settled on its view (not asking).
const SETTLED: &str = "document.body && document.body.dataset.loaded === 'true' \
    && !document.querySelector('[data-ask]')";

/// The page has settled on its question.
const ASKING: &str = "document.body && document.body.dataset.loaded === 'true' \
    && document.querySelector('[data-ask=\"replace-key\"]')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_link_asks_before_replacing_the_tabs_key() {
    let d = support::TestDaemon::start().await;
    let base = d.admin.base().to_string();
    let r = d
        .admin
        .post_json(
            "/v1/keys",
            &json!({"label": "other", "grants": {"scopes": ["nouns:read"]}}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let (other, other_id) = {
        let b = body(&r);
        (
            b["secret"].as_str().unwrap().to_string(),
            b["key_id"].as_str().unwrap().to_string(),
        )
    };
    let (admin, admin_id) = (d.admin_key.clone(), key_id(&d.admin_key));
    let mut b = cdp::Browser::launch().await;
    let no_secret = |state: &serde_json::Value| {
        let html = state["html"].as_str().unwrap();
        assert!(
            !html.contains(&admin) && !html.contains(&other),
            "a secret in the page"
        );
        assert!(!state["hash"].as_str().unwrap().contains("key="), "{state}");
    };

    // No key yet: the link's key is taken.
    b.open(&format!("{base}/#key={admin}")).await;
    b.wait_for(SETTLED).await;
    let s = b.eval(STATE).await;
    assert_eq!(s["stored"], json!(admin));
    assert!(
        s["who"].as_str().unwrap().contains(&admin_id),
        "{}",
        s["who"]
    );
    no_secret(&s);

    // A key set, a link with another opened in the tab: asked, with both
    // ids; declining keeps the current key.
    b.open(&format!("{base}/#/tasks?key={other}")).await;
    b.wait_for(ASKING).await;
    let s = b.eval(STATE).await;
    let asking = s["asking"].as_str().unwrap();
    assert!(
        asking.contains(&admin_id) && asking.contains(&other_id),
        "{asking}"
    );
    assert_eq!(s["stored"], json!(admin), "nothing replaced while asking");
    no_secret(&s);
    b.eval("document.querySelector('[data-answer=\"keep\"]').click()")
        .await;
    b.wait_for(SETTLED).await;
    let s = b.eval(STATE).await;
    assert_eq!(s["stored"], json!(admin), "declined: the current key stays");
    assert!(
        s["who"].as_str().unwrap().contains(&admin_id),
        "{}",
        s["who"]
    );
    assert_eq!(
        s["hash"],
        json!("#/tasks"),
        "the link's page, without its key"
    );
    no_secret(&s);

    // The same link followed within the page (a hash change): asked
    // again; accepting replaces the key.
    b.eval(&format!("location.hash = '#key={other}'")).await;
    b.wait_for(ASKING).await;
    assert_eq!(b.eval(STATE).await["stored"], json!(admin));
    b.eval("document.querySelector('[data-answer=\"replace\"]').click()")
        .await;
    b.wait_for(SETTLED).await;
    let s = b.eval(STATE).await;
    assert_eq!(s["stored"], json!(other), "accepted: the link's key");
    assert!(
        s["who"].as_str().unwrap().contains(&other_id),
        "{}",
        s["who"]
    );
    no_secret(&s);

    // A link with the key the tab already holds asks nothing.
    b.open(&format!("{base}/#key={other}")).await;
    b.wait_for(SETTLED).await;
    assert_eq!(b.eval(STATE).await["stored"], json!(other));
}

/// The id of a `tsk_<id>_<hex>` secret.
fn key_id(secret: &str) -> String {
    secret
        .split('_')
        .nth(1)
        .expect("tsk_<id>_<hex>")
        .to_string()
}

/// The nouns the page lists, as `namespace/store/key`, in its order.
const LISTED: &str = "[...document.querySelectorAll('[data-noun]')].map(a => a.dataset.noun)";

/// The page settled on a view whose address starts with `hash`.
fn settled_on(hash: &str) -> String {
    format!("{SETTLED} && location.hash.startsWith('{hash}')")
}

/// Runs `action` (JavaScript that moves the page to another view) and
/// waits until the page has loaded the view at `hash`. The page's loaded
/// mark is cleared first, so the previous view cannot answer for it.
async fn go(b: &mut cdp::Browser, action: &str, hash: &str) {
    b.eval(&format!(
        "document.body.dataset.loaded = 'moving'; {{ {action} }}"
    ))
    .await;
    b.wait_for(&settled_on(hash)).await;
}

/// The nouns the page lists.
async fn listed(b: &mut cdp::Browser) -> Vec<String> {
    serde_json::from_value(b.eval(LISTED).await).expect("a list of names")
}

/// The nouns `c` may read, as `GET /v1/nouns` answers them.
async fn readable(c: &tessera::client::Client) -> Vec<String> {
    let list = body(&c.get("/v1/nouns?limit=1000").await.unwrap());
    assert!(list["next_cursor"].is_null(), "one page: {list}");
    list["nouns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            ["namespace", "store", "key"]
                .map(|f| n[f].as_str().unwrap())
                .join("/")
        })
        .collect()
}

/// Creates a noun with a whole envelope (`path` may carry `?source_pack=`).
async fn put(c: &tessera::client::Client, path: &str, mut envelope: serde_json::Value) {
    envelope["expected_version"] = json!(0);
    let r = c.put_json(path, &envelope).await.unwrap();
    assert_status!(r, 201);
}

/// The namespace no key of the team holds a scope for.
const ELSEWHERE: &str = "elsewhere";

/// The text body of the markup noun: an HTML page, stored as `text/html`.
fn markup_body() -> String {
    format!("<h1>release notes</h1>\n{UNTRUSTED}\n")
}

struct Nouns {
    team: Team,
    base: String,
    viewer_key: String,
}

/// A team's nouns: an input in two versions, a contract, the worker's
/// output, an HTML page (markup in a `text/html` body), a noun written by
/// a seed pack's import, and three the viewer may not read: the
/// requester's private noun, a quarantined one and an admin's noun in a
/// namespace the viewer holds no scope for.
async fn nouns_world() -> Nouns {
    let team = Team::start().await;
    let base = team.d.admin.base().to_string();
    let r = &team.requester;
    put_noun(r, "work.inputs", "numbers", json!({"numbers": [3, 4]})).await;
    put_noun(r, "work.inputs", "numbers", json!({"numbers": [3, 4, 12]})).await;
    put(
        r,
        &format!("/v1/nouns/{NS}/work.contracts/sum-squares"),
        json!({"type": "noun.contract", "body": {"output": "the sum of the squares"}}),
    )
    .await;
    put_noun(
        &team.worker,
        "work.outputs",
        "answer",
        json!({"sum_of_squares": 169}),
    )
    .await;
    put(
        r,
        &format!("/v1/nouns/{NS}/work.notes/release"),
        json!({"media_type": "text/html; charset=utf-8", "body_base64": base64_of(&markup_body())}),
    )
    .await;
    put(
        r,
        &format!("/v1/nouns/{NS}/work.inputs/seeded?source_pack=pack-a"),
        json!({"body": {"numbers": [1, 2]}}),
    )
    .await;
    put(
        r,
        &format!("/v1/nouns/{NS}/work.inputs/private"),
        json!({"visibility": "private", "body": {"directive": HIDDEN_BRIEF}}),
    )
    .await;
    put(
        &team.d.admin,
        &format!("/v1/nouns/{ELSEWHERE}/docs/readme"),
        json!({"body": {"note": "admin's own"}}),
    )
    .await;
    put(
        r,
        &format!("/v1/nouns/{NS}/work.inputs/stale"),
        json!({"body": {"numbers": [0]}}),
    )
    .await;
    let q = team
        .d
        .admin
        .post_json(
            &format!("/v1/nouns/{NS}/work.inputs/stale/quarantine"),
            &json!({}),
        )
        .await
        .unwrap();
    assert_status!(q, 200);
    let (_, viewer_key) = viewer(&team).await;
    Nouns {
        team,
        base,
        viewer_key,
    }
}

/// Standard base64 of `text`.
fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nouns_page_lists_and_opens_exactly_what_each_key_may_read() {
    let w = nouns_world().await;
    let admin_key = w.team.d.admin_key.clone();
    let viewer = w.team.d.client(&w.viewer_key);
    let numbers = format!("{NS}/work.inputs/numbers");
    let seeded = format!("{NS}/work.inputs/seeded");
    let private = format!("{NS}/work.inputs/private");
    let stale = format!("{NS}/work.inputs/stale");
    let elsewhere = format!("{ELSEWHERE}/docs/readme");

    // Each key's list is the API's list for that key: the viewer's leaves
    // out the private noun, the quarantined one and the other namespace;
    // admin's has them.
    for (key, client, hidden_shown) in [
        (&w.viewer_key, &viewer, false),
        (&admin_key, &w.team.d.admin, true),
    ] {
        let mut b = cdp::Browser::launch().await;
        b.open(&format!("{}/#/nouns?key={key}", w.base)).await;
        b.wait_for(&settled_on("#/nouns")).await;
        let rows = listed(&mut b).await;
        assert_eq!(
            rows,
            readable(client).await,
            "the page lists the API's nouns"
        );
        assert!(
            rows.contains(&numbers) && rows.contains(&seeded),
            "{rows:?}"
        );
        for name in [&private, &stale, &elsewhere] {
            assert_eq!(rows.contains(name), hidden_shown, "{name} in {rows:?}");
        }
    }

    let mut b = cdp::Browser::launch().await;
    b.open(&format!("{}/#/nouns?key={}", w.base, w.viewer_key))
        .await;
    b.wait_for(&settled_on("#/nouns")).await;
    let everything = listed(&mut b).await;

    // The filter form narrows the list to a store; the seed pack filter
    // to what the pack's import wrote.
    go(
        &mut b,
        "const f = document.querySelector('form.filters'); \
         f.elements.store.value = 'work.inputs'; f.requestSubmit()",
        "#/nouns?store=work.inputs",
    )
    .await;
    assert_eq!(listed(&mut b).await, [numbers.clone(), seeded.clone()]);
    go(
        &mut b,
        "location.hash = '#/nouns?source_pack=pack-a'",
        "#/nouns?source_pack=",
    )
    .await;
    assert_eq!(listed(&mut b).await, [seeded]);
    go(
        &mut b,
        "location.hash = '#/nouns?namespace=nobody'",
        "#/nouns?namespace=",
    )
    .await;
    assert!(listed(&mut b).await.is_empty());
    let text = b.eval("document.getElementById('main').textContent").await;
    assert!(text.as_str().unwrap().contains("404 not_found"), "{text}");

    // Pages of two, followed by their cursor, make up the whole list.
    go(
        &mut b,
        "location.hash = '#/nouns?limit=2'",
        "#/nouns?limit=2",
    )
    .await;
    let mut pages = vec![listed(&mut b).await];
    while b
        .eval("!!document.querySelector('[data-page=\"next\"]')")
        .await
        == json!(true)
    {
        go(
            &mut b,
            "document.querySelector('[data-page=\"next\"]').click()",
            "#/nouns?limit=2&cursor=",
        )
        .await;
        pages.push(listed(&mut b).await);
        assert!(pages.len() < 10, "the cursor moves on: {pages:?}");
    }
    assert!(pages.len() > 1, "more than one page: {pages:?}");
    assert!(pages.iter().all(|p| p.len() <= 2), "{pages:?}");
    assert_eq!(pages.concat(), everything);

    // A click on a noun opens it: its versions, the latest's pin and body.
    go(&mut b, "location.hash = '#/nouns'", "#/nouns").await;
    go(
        &mut b,
        &format!("document.querySelector('[data-noun=\"{numbers}\"]').click()"),
        &format!("#/noun/{NS}/work.inputs/numbers"),
    )
    .await;
    let versions = body(
        &viewer
            .get(&format!("/v1/nouns/{numbers}/versions"))
            .await
            .unwrap(),
    );
    let shas: Vec<&str> = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["sha256"].as_str().unwrap())
        .collect();
    const SHOWN: &str = "({versions: [...document.querySelectorAll('[data-version]')].map(v => v.textContent), \
        text: document.getElementById('main').textContent, \
        body: [...document.querySelectorAll('#main section')].pop().querySelector('pre').textContent})";
    let body_of = |page: &serde_json::Value| -> serde_json::Value {
        serde_json::from_str(page["body"].as_str().unwrap()).expect("a JSON body")
    };
    let page = b.eval(SHOWN).await;
    assert_eq!(page["versions"], json!(["v1", "v2"]));
    let text = page["text"].as_str().unwrap();
    assert!(text.contains(shas[1]), "the pin of v2: {text}");
    assert_eq!(body_of(&page), json!({"numbers": [3, 4, 12]}));
    assert!(
        text.contains(&w.team.ids["requester"]),
        "who wrote it: {text}"
    );
    go(
        &mut b,
        "document.querySelector('a[data-version=\"1\"]').click()",
        &format!("#/noun/{NS}/work.inputs/numbers?version=1"),
    )
    .await;
    let page = b.eval(SHOWN).await;
    let text = page["text"].as_str().unwrap();
    assert!(text.contains(shas[0]), "the pin of v1: {text}");
    assert_eq!(body_of(&page), json!({"numbers": [3, 4]}));

    // Markup in a text/html body is shown as its text.
    go(
        &mut b,
        &format!("location.hash = '#/noun/{NS}/work.notes/release'"),
        "#/noun/",
    )
    .await;
    let shown = b
        .eval("document.querySelector('pre.body').textContent")
        .await;
    assert_eq!(shown, json!(markup_body()));
    assert_eq!(b.eval("document.title").await, json!("Tessera overview"));
    let html = b.eval("document.documentElement.outerHTML").await;
    markup_stays_text(html.as_str().unwrap());

    // Opening by path still works; a noun the key may not read is the
    // API's 404, showing nothing of it.
    go(&mut b, "location.hash = '#/nouns'", "#/nouns").await;
    go(
        &mut b,
        &format!(
            "const f = document.querySelector('[data-form=\"open-noun\"]'); \
             f.elements.ns.value = '{NS}'; f.elements.store.value = 'work.inputs'; \
             f.elements.key.value = 'private'; f.requestSubmit()"
        ),
        &format!("#/noun/{NS}/work.inputs/private"),
    )
    .await;
    let text = b.eval("document.getElementById('main').textContent").await;
    let text = text.as_str().unwrap();
    assert!(text.contains("404 not_found"), "{text}");
    assert!(!text.contains(HIDDEN_BRIEF), "{text}");
    drop(b);

    // Screenshots of the admin's Nouns page and of a noun; docs/nouns.png
    // and docs/nouns-noun.png on request.
    screenshot(
        &format!("{}/#/nouns?key={admin_key}", w.base),
        "1280,640",
        "nouns.png",
    )
    .await;
    screenshot(
        &format!("{}/#/noun/{numbers}?key={admin_key}", w.base),
        "1280,900",
        "nouns-noun.png",
    )
    .await;
}

/// Reads the page's width and the overflow of its header.
const WIDTHS: &str = "({inner: innerWidth, scroll: document.documentElement.scrollWidth, \
    header: document.querySelector('header.top').scrollWidth, \
    right: Math.max(...[...document.querySelectorAll('header.top *')] \
        .map(e => e.getBoundingClientRect().right))})";

/// The phone width the header must fit.
const PHONE: u32 = 375;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_fits_a_phone_screen() {
    let w = nouns_world().await;
    let admin_key = w.team.d.admin_key.clone();
    let mut b = cdp::Browser::launch().await;
    b.set_viewport(PHONE, 800).await;
    b.open(&format!("{}/#key={admin_key}", w.base)).await;
    b.wait_for(SETTLED).await;
    // Each step changes the address (the page opened on `#/`): setting
    // the one it is on would fire no hashchange and load nothing.
    for page in [
        "#/tasks",
        "#/",
        "#/nouns",
        &format!("#/noun/{NS}/work.notes/release"),
    ] {
        go(&mut b, &format!("location.hash = '{page}'"), page).await;
        let m = b.eval(WIDTHS).await;
        let inner = m["inner"].as_u64().unwrap();
        assert_eq!(inner, u64::from(PHONE), "the viewport is a phone's: {m}");
        for what in ["scroll", "header"] {
            assert!(
                m[what].as_u64().unwrap() <= inner,
                "{page}: {what} overflows: {m}"
            );
        }
        assert!(m["right"].as_f64().unwrap() <= inner as f64, "{page}: {m}");
    }
    go(&mut b, "location.hash = '#/nouns'", "#/nouns").await;
    keep_screenshot("nouns-phone.png", &b.screenshot().await);
}

/// Takes a screenshot of `url` in a window of `size` (`W,H`) for
/// [`keep_screenshot`].
async fn screenshot(url: &str, size: &str, name: &str) {
    let shots = tempfile::tempdir().expect("screenshot dir");
    let shot = shots.path().join(name);
    chromium(
        url,
        &[
            format!("--screenshot={}", shot.display()),
            format!("--window-size={size}"),
        ],
    )
    .await;
    keep_screenshot(
        name,
        &std::fs::read(&shot).expect("chromium wrote the screenshot"),
    );
}

/// Checks `png` is a PNG and, with `TESSERA_UPDATE_SCREENSHOT=1`, writes it
/// to `docs/<name>`.
fn keep_screenshot(name: &str, png: &[u8]) {
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    if std::env::var_os("TESSERA_UPDATE_SCREENSHOT").is_some_and(|v| v == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs")
            .join(name);
        std::fs::write(&docs, png).unwrap_or_else(|e| panic!("write docs/{name}: {e}"));
    }
}
