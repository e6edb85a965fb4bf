//! The team-private work scenario, over HTTP only: shared by the example
//! (`main.rs`) and the integration tests, which assert each step.
//!
//! Requester, worker and resumer keys share one surface in namespace
//! `conformance-routing`, each with explicit queue, kind, namespace and
//! action grants. The requester stores a typed contract and enqueues
//! `verb.solve_draft` pinning it and an input that does not exist yet; the
//! worker checks the pins, parks for the missing input; the resumer
//! supplies it; the worker splits the sum of squares into two child
//! calculations, completes them, reclaims the parent, combines, and submits
//! the final artifact with a self-check as `noun.eval_run` records. Along
//! the way, four boundaries are tried and must hold.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tessera::client::{Client, Reply};
use tessera::store::Sha256;
use tessera::worker::contract;

/// The namespace the scenario works in.
pub const NS: &str = "conformance-routing";
/// The team's surface.
pub const SURFACE: &str = "team_example";

/// One boundary tried, and what happened.
#[derive(Clone, Debug)]
pub struct Boundary {
    /// What was tried.
    pub name: &'static str,
    /// The status that shows the boundary holds.
    pub expected: u16,
    /// The status the daemon answered.
    pub got: u16,
    /// The error code it gave.
    pub code: String,
}

impl Boundary {
    /// Whether the boundary held.
    pub fn held(&self) -> bool {
        self.expected == self.got
    }
}

/// What the scenario did and saw.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// One line per step, in order.
    pub steps: Vec<String>,
    /// The task ids: solve_draft and its two children.
    pub parent: String,
    /// The children, in order.
    pub children: Vec<String>,
    /// What the worker parked with.
    pub park_needs: Value,
    /// The combined result.
    pub result: i64,
    /// The daemon's contract checks on the final receipt.
    pub checks: Vec<Value>,
    /// Receipt hashes in order (children, then the parent), labelled.
    pub receipts: Vec<(String, String)>,
    /// The receipt records, in the same order.
    pub receipt_records: Vec<Value>,
    /// The boundaries tried.
    pub boundaries: Vec<Boundary>,
    /// The final artifact's pin.
    pub artifact: Value,
    /// The self-check's pin.
    pub self_check: Value,
}

impl Report {
    /// sha256 over the receipt hashes in order. Differs between runs: each
    /// receipt holds its time (`at`) and the submitting key's id (`by_key`).
    pub fn run_fingerprint(&self) -> String {
        let joined: String = self
            .receipts
            .iter()
            .map(|(_, h)| format!("{h}\n"))
            .collect();
        Sha256::of(joined.as_bytes()).hex()
    }

    /// sha256 over the receipt records in order with `at` and `by_key`
    /// removed: the same on every run of the same input.
    pub fn content_fingerprint(&self) -> String {
        let mut joined = Vec::new();
        for r in &self.receipt_records {
            let mut r = r.clone();
            if let Some(m) = r.as_object_mut() {
                m.remove("task_id");
                m.remove("at");
                m.remove("by_key");
            }
            joined.extend(tessera::store::canonical_json(&r));
        }
        Sha256::of(&joined).hex()
    }
}

/// Any failure of the scenario, with what was being done.
pub type Failure = String;

fn check(r: &Reply, want: u16, what: &str) -> Result<Value, Failure> {
    if r.status.as_u16() == want {
        Ok(r.value())
    } else {
        Err(format!(
            "{what}: expected {want}, got {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ))
    }
}

async fn call(
    fut: impl std::future::Future<Output = Result<Reply, tessera::client::ClientError>>,
) -> Result<Reply, Failure> {
    fut.await.map_err(|e| e.to_string())
}

/// The contract and the input, read from the Frontier example seed pack so
/// there is one definition of each.
fn pack_bodies() -> Result<(Value, Value), Failure> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/frontier-example");
    let plan =
        tessera_importer::plan(&dir).map_err(|r| format!("the example pack is invalid:\n{r}"))?;
    let body = |store: &str, key: &str| {
        plan.nouns
            .iter()
            .find(|n| n.store == store && n.key == key)
            .and_then(|n| match &n.body {
                tessera_importer::NounBody::Json(v) => Some(v.clone()),
                tessera_importer::NounBody::Bytes { .. } => None,
            })
            .ok_or(format!("the pack has no JSON noun {store}/{key}"))
    };
    Ok((
        body("work.contracts", "sum-squares")?,
        body("work.inputs", "numbers")?,
    ))
}

async fn issue(
    admin: &Client,
    label: &str,
    kinds: &[&str],
    scopes: &[&str],
) -> Result<Client, Failure> {
    let mut all = vec![format!("namespace:{NS}")];
    all.extend(scopes.iter().map(|s| s.to_string()));
    let spec = json!({
        "label": label,
        "account_id": "acct-team",
        "grants": {"queues": ["work.external"], "kinds": kinds, "effect_classes": ["read", "write-internal"], "scopes": all},
    });
    let issued = check(
        &call(admin.post_json("/v1/keys", &spec)).await?,
        201,
        "issue a key",
    )?;
    Ok(admin.with_bearer(issued["secret"].as_str().unwrap_or_default()))
}

/// Reads a pinned noun and checks the bytes against the pin's hash.
async fn read_pinned(c: &Client, pin: &Value) -> Result<Value, Failure> {
    let path = format!(
        "/v1/nouns/{}/{}/{}?version={}&sha256={}",
        pin["namespace"].as_str().unwrap_or(NS),
        pin["store"].as_str().unwrap_or_default(),
        pin["key"].as_str().unwrap_or_default(),
        pin["version"],
        pin["sha256"].as_str().unwrap_or_default()
    );
    let r = call(c.get(&path)).await?;
    check(&r, 200, "read a pinned noun")?;
    if Sha256::of(&r.body).hex() != pin["sha256"].as_str().unwrap_or_default() {
        return Err("the bytes do not hash to the pin".into());
    }
    serde_json::from_slice(&r.body).map_err(|e| e.to_string())
}

async fn put(
    c: &Client,
    store: &str,
    key: &str,
    noun_type: &str,
    visibility: &str,
    body: Value,
) -> Result<Value, Failure> {
    let env =
        json!({"expected_version": 0, "type": noun_type, "visibility": visibility, "body": body});
    let r = call(c.put_json(&format!("/v1/nouns/{NS}/{store}/{key}"), &env)).await?;
    let b = check(&r, 201, &format!("store {store}/{key}"))?;
    Ok(
        json!({"namespace": NS, "store": store, "key": key, "version": b["version"], "sha256": b["sha256"]}),
    )
}

async fn claim(c: &Client, what: &str) -> Result<Value, Failure> {
    check(
        &call(c.post_json("/v1/queues/work.external/claim", &json!({"wait_ms": 2000}))).await?,
        200,
        what,
    )
}

async fn submit(
    c: &Client,
    claim: &Value,
    outputs: Value,
    evidence: Value,
) -> Result<Value, Failure> {
    let id = claim["task"]["task_id"].as_str().unwrap_or_default();
    let body = json!({"lease_id": claim["lease"]["id"], "ok": true, "outputs": outputs, "evidence": evidence});
    check(
        &call(c.post_json(&format!("/v1/tasks/{id}/submit"), &body)).await?,
        201,
        &format!("submit {id}"),
    )
}

async fn receipt(c: &Client, id: &str) -> Result<(String, Value), Failure> {
    let r = check(
        &call(c.get(&format!("/v1/tasks/{id}/receipts"))).await?,
        200,
        "read receipts",
    )?;
    let last = r["receipts"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .ok_or("no receipt")?;
    Ok((
        last["sha256"].as_str().unwrap_or_default().to_string(),
        last["receipt"].clone(),
    ))
}

fn sum_of_squares(numbers: &[i64]) -> i64 {
    numbers.iter().map(|n| n * n).sum()
}

/// Runs the scenario against a daemon; `admin` holds its admin key.
pub async fn run(admin: &Client) -> Result<Report, Failure> {
    let mut rep = Report::default();
    let (contract_body, input_body) = pack_bodies()?;

    // 1. Queues and keys.
    for q in [
        json!({"name": "work.external", "lease_ttl_s": 30}),
        json!({"name": "work.server", "server": true}),
    ] {
        check(
            &call(admin.post_json("/v1/queues", &q)).await?,
            201,
            "provision a queue",
        )?;
    }
    let kinds = ["verb.solve_draft", "verb.verify_gate"];
    let team = [
        format!("surface:{SURFACE}"),
        "nouns:read".into(),
        "cas:write".into(),
    ];
    let team: Vec<&str> = team.iter().map(String::as_str).collect();
    let requester = issue(
        admin,
        "requester",
        &kinds,
        &[&team[..], &["verbs:enqueue"]].concat(),
    )
    .await?;
    let worker = issue(
        admin,
        "worker",
        &kinds,
        &[&team[..], &["verbs:claim", "verbs:submit"]].concat(),
    )
    .await?;
    let resumer = issue(
        admin,
        "resumer",
        &kinds,
        &[&team[..], &["verbs:enqueue"]].concat(),
    )
    .await?;
    let outsider = issue(
        admin,
        "outsider",
        &kinds,
        &["surface:elsewhere", "nouns:read"],
    )
    .await?;
    rep.steps.push("provisioned work.external and the server queue work.server; issued requester, worker, resumer and outsider keys".into());

    // 2. The contract, a private note, and the task pinning an input that does not exist yet.
    let contract_pin = put(
        &requester,
        "work.contracts",
        "sum-squares",
        "noun.skill_pack",
        "surface_only",
        contract_body.clone(),
    )
    .await?;
    put(
        &requester,
        "work.private",
        "plan",
        "noun.note",
        "private",
        json!({"note": "the requester's own"}),
    )
    .await?;
    let spec = json!({
        "namespace": NS, "queue": "work.external", "kind": "verb.solve_draft", "effect_class": "write-internal",
        "producer_surface": format!("surface:{SURFACE}"), "visibility_scope": "surface_only", "allowed_surfaces": [],
        "target_cohorts": ["all"], "tags": ["category:verb.solve_draft"], "idempotency_key": "team-private-work-1",
        "lease_ttl_s": 2,
        "brief": {"contract": "tessera.work.example.v1", "category_id": "verb.solve_draft", "contract_ref": contract_pin, "input_ref": null},
    });
    let enq = check(
        &call(requester.post_json("/v1/tasks", &spec)).await?,
        201,
        "enqueue verb.solve_draft",
    )?;
    rep.parent = enq["task_id"].as_str().unwrap_or_default().to_string();
    rep.steps.push(format!("requester stored the noun.skill_pack contract and enqueued {} pinning it, with its input still to come", rep.parent));

    // 3. The worker claims, checks the pins and the contract, and parks for the input.
    let first = claim(&worker, "first claim").await?;
    let brief = &first["task"]["brief"];
    let read_contract = read_pinned(&worker, &brief["contract_ref"]).await?;
    let schema: Value =
        serde_json::from_str(contract::SKILL_PACK_SCHEMA).map_err(|e| e.to_string())?;
    contract::validate(&schema, &read_contract)
        .map_err(|e| format!("the contract is invalid: {e}"))?;
    if read_contract["execution"] != json!({"worker": "external", "server_fallback": false})
        || read_contract["shims"] != "none"
    {
        return Err("the contract asks for an execution this worker does not offer".into());
    }
    let input_probe = read_pinned(&worker, &brief["input_ref"]).await;
    if input_probe.is_ok() {
        return Err("the input should not exist yet".into());
    }
    rep.park_needs = json!({
        "input_ref": {"namespace": NS, "store": "work.inputs", "key": "numbers"},
        "type": "noun.input",
        "schema": read_contract["input_schema"],
        "why": "the brief pins no input yet: work.inputs/numbers does not exist",
    });
    let park = json!({"lease_id": first["lease"]["id"], "reason": "input noun missing", "needs": rep.park_needs});
    check(
        &call(worker.post_json(&format!("/v1/tasks/{}/park", rep.parent), &park)).await?,
        200,
        "park",
    )?;
    rep.steps.push(
        "worker claimed, checked contract hash and schema, found the input missing and parked"
            .into(),
    );

    // 4. Another key supplies the input and resumes.
    let input_pin = put(
        &resumer,
        "work.inputs",
        "numbers",
        "noun.input",
        "surface_only",
        input_body.clone(),
    )
    .await?;
    let resumed = check(
        &call(resumer.post_json(
            &format!("/v1/tasks/{}/resume", rep.parent),
            &json!({"input_ref": input_pin}),
        ))
        .await?,
        200,
        "resume",
    )?;
    rep.steps.push(format!(
        "resumer stored the input and resumed the task ({})",
        resumed["state"].as_str().unwrap_or("?")
    ));

    // 5. Reclaim, split into two deterministic halves, complete each child.
    let second = claim(&worker, "reclaim after resume").await?;
    let input = read_pinned(&worker, &second["task"]["brief"]["input_ref"]).await?;
    let numbers: Vec<i64> = input["numbers"]
        .as_array()
        .ok_or("input without numbers")?
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    let (a, b) = numbers.split_at(numbers.len() / 2);
    let child = |half: &[i64], step: &str| json!({"queue": "work.external", "kind": "verb.solve_draft", "effect_class": "write-internal", "brief": {"operation": "sum_of_squares", "numbers": half, "step": step}});
    let split = json!({"lease_id": second["lease"]["id"], "children": [child(a, "partial-a"), child(b, "partial-b")]});
    let done = check(
        &call(worker.post_json(&format!("/v1/tasks/{}/split", rep.parent), &split)).await?,
        200,
        "split",
    )?;
    rep.children = done["children"]
        .as_array()
        .ok_or("no children")?
        .iter()
        .filter_map(|c| c.as_str().map(str::to_string))
        .collect();
    let mut partials = Vec::new();
    for (i, label) in ["partial-a", "partial-b"].iter().enumerate() {
        let c = claim(&worker, "claim a child").await?;
        let half: Vec<i64> = c["task"]["brief"]["numbers"]
            .as_array()
            .ok_or("child without numbers")?
            .iter()
            .filter_map(Value::as_i64)
            .collect();
        let partial = sum_of_squares(&half);
        let pin = put(
            &worker,
            "work.artifacts",
            label,
            "noun.artifact",
            "surface_only",
            json!({"partial_sum_of_squares": partial, "numbers": half}),
        )
        .await?;
        let s = submit(&worker, &c, json!([pin]), json!([])).await?;
        rep.receipts.push((
            format!("child {} ({label})", rep.children[i]),
            s["receipt_sha256"].as_str().unwrap_or_default().to_string(),
        ));
        partials.push(pin);
    }
    rep.steps.push(format!(
        "worker split into {} and {}, computed each half, and submitted their receipts",
        rep.children[0], rep.children[1]
    ));

    // The parent is queued again once both children ended: combine.
    let third = claim(&worker, "reclaim the parent").await?;
    if third["task"]["task_id"] != json!(rep.parent) {
        return Err("expected the parent back".into());
    }
    let mut total = 0;
    for c in third["task"]["children"].as_array().ok_or("no children")? {
        if c["state"] != "succeeded" || c["ok"] != true {
            return Err(format!("child {} did not succeed", c["task_id"]));
        }
        let (_, rec) = receipt(&worker, c["task_id"].as_str().unwrap_or_default()).await?;
        let part = read_pinned(&worker, &rec["outputs"][0]).await?;
        total += part["partial_sum_of_squares"]
            .as_i64()
            .ok_or("a partial without its sum")?;
    }
    rep.result = total;
    let recomputed = sum_of_squares(&numbers);
    rep.artifact = put(
        &worker,
        "work.artifacts",
        "sum-squares-result",
        "noun.eval_run",
        "surface_only",
        json!({"sum_of_squares": total}),
    )
    .await?;
    rep.self_check = put(&worker, "work.evidence", "sum-squares-self-check", "noun.eval_run", "surface_only", json!({
        "check": "recompute_from_input", "input_sha256": second["task"]["brief"]["input_ref"]["sha256"],
        "combined": total, "recomputed": recomputed, "ok": total == recomputed, "partials": partials,
    })).await?;
    let hb = json!({"lease_id": third["lease"]["id"]});
    check(
        &call(worker.post_json(&format!("/v1/tasks/{}/heartbeat", rep.parent), &hb)).await?,
        200,
        "heartbeat",
    )?;
    let fin = submit(
        &worker,
        &third,
        json!([rep.artifact]),
        json!([rep.self_check]),
    )
    .await?;
    if fin["state"] != "succeeded" {
        return Err(format!("the final submit did not succeed: {fin}"));
    }
    rep.receipts.push((
        format!("parent {}", rep.parent),
        fin["receipt_sha256"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    ));
    rep.steps.push(format!("worker reclaimed {}, combined the partial sums, and submitted the artifact and self-check (noun.eval_run)", rep.parent));

    // 6. Boundaries.
    let mut tried = |name: &'static str, expected: u16, r: &Reply| {
        rep.boundaries.push(Boundary {
            name,
            expected,
            got: r.status.as_u16(),
            code: r.error_code().unwrap_or_default(),
        });
    };
    let r = call(worker.post_json("/v1/queues/work.server/claim", &json!({}))).await?;
    tried(
        "the server queue is unknown to the worker key (404, as a missing queue)",
        404,
        &r,
    );
    let r = call(worker.get(&format!("/v1/nouns/{NS}/work.private/plan"))).await?;
    tried(
        "the worker cannot read the requester's private noun",
        404,
        &r,
    );
    let contract_path = format!("/v1/nouns/{NS}/work.contracts/sum-squares");
    let plain = call(outsider.get(&contract_path)).await?;
    let forged = call(outsider.send(
        http::Method::GET,
        &contract_path,
        None,
        &[("x-surface-id", SURFACE)],
    ))
    .await?;
    if plain.status != forged.status || plain.body != forged.body {
        return Err("an X-Surface-Id header changed an answer".into());
    }
    tried(
        "an X-Surface-Id header grants nothing (another surface's key, with the header)",
        404,
        &forged,
    );
    let expires: jiff::Timestamp = first["lease"]["expires_at"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .map_err(|e| format!("{e}"))?;
    let wait = (expires - jiff::Timestamp::now()).as_millis().max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait.min(35_000) + 50)).await;
    let late = json!({"lease_id": first["lease"]["id"], "ok": true, "outputs": [rep.artifact]});
    let r = call(worker.post_json(&format!("/v1/tasks/{}/submit", rep.parent), &late)).await?;
    tried(
        "a late submit on the expired first lease is fenced",
        409,
        &r,
    );

    // 7. Receipts.
    for id in rep.children.clone().iter().chain([&rep.parent.clone()]) {
        let (_, rec) = receipt(&worker, id).await?;
        rep.receipt_records.push(rec);
    }
    rep.checks = rep
        .receipt_records
        .last()
        .and_then(|r| r["checks"].as_array().cloned())
        .unwrap_or_default();
    Ok(rep)
}
