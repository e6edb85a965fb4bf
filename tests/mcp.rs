//! MCP over real traffic: `tessera mcp` spawned against a live daemon and
//! spoken to in newline-delimited JSON-RPC on its stdio, and the daemon's
//! own `/mcp` over streamable HTTP. Both run the seed-000 cycle (a key
//! holder enqueues and claims; an agent holding only the `wh-` handle
//! fetches its prompt, reads its pinned input, heartbeats, stages a part,
//! lists its parts and submits), and API errors come back as tool errors
//! carrying the HTTP status and error code.

use crate::support;

use std::process::Stdio as Piped;
use std::time::Duration;

use http::Method;
use serde_json::{Value, json};
use support::*;
use tessera::client::Client;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Every tool the server lists.
const TOOLS: [&str; 10] = [
    "claim",
    "enqueue",
    "get_task",
    "put_noun",
    "get_prompt",
    "read_noun",
    "heartbeat",
    "stage_part",
    "list_parts",
    "submit",
];

/// How long one JSON-RPC answer may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// A contract for `verb.solve_draft` expecting `{sum_of_squares}` and a
/// required `notes.md` part.
fn contract() -> Value {
    json!({
        "contract": "tessera.work.agent.v1",
        "operation": {"name": "sum_of_squares"},
        "directive": "Sum the squares of the input's numbers.",
        "input_schema": {"type": "object", "required": ["numbers"]},
        "output_schema": {
            "type": "object",
            "required": ["sum_of_squares"],
            "properties": {"sum_of_squares": {"type": "integer"}}
        },
        "checks": [{"name": "output_matches_schema"}],
        "parts": [{"name": "notes.md", "media_type": "text/markdown", "required": true}],
        "shims": "none",
        "execution": {"worker": "external", "server_fallback": false}
    })
}

/// Issues a key that may enqueue, claim and submit in the team's space.
async fn agent_key(t: &Team) -> String {
    let scopes = json!([
        format!("namespace:{NS}"),
        format!("surface:{SURFACE}"),
        "nouns:read",
        "cas:write",
        "verbs:enqueue",
        "verbs:claim",
        "verbs:submit"
    ]);
    let r =
        t.d.admin
            .post_json(
                "/v1/keys",
                &json!({"label": "mcp-agent", "grants": {
                    "queues": ["work.external"],
                    "kinds": ["verb.solve_draft"],
                    "effect_classes": ["write-internal"],
                    "scopes": scopes
                }}),
            )
            .await
            .unwrap();
    assert_status!(r, 201);
    body(&r)["secret"].as_str().unwrap().to_string()
}

/// `tessera mcp` as a child, spoken to over its stdio.
struct StdioMcp {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl StdioMcp {
    /// Spawns `tessera mcp --daemon BASE` with `env` (and no inherited
    /// Tessera credentials), then initializes the session.
    async fn start(base: &str, env: &[(&str, &str)]) -> StdioMcp {
        StdioMcp::start_declaring(base, env, json!({})).await
    }

    /// [`StdioMcp::start`], declaring `capabilities` at `initialize`.
    async fn start_declaring(base: &str, env: &[(&str, &str)], capabilities: Value) -> StdioMcp {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
        cmd.args(["mcp", "--daemon", base])
            .env_remove("TESSERA_KEY")
            .env_remove("TESSERA_HANDLE")
            .env("RUST_LOG", "warn")
            .stdin(Piped::piped())
            .stdout(Piped::piped())
            .stderr(Piped::inherit())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn tessera mcp");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut mcp = StdioMcp {
            child,
            stdin,
            lines,
            next_id: 1,
        };
        let init = mcp
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": capabilities,
                    "clientInfo": {"name": "tessera-test", "version": "1"}
                }),
            )
            .await;
        assert_eq!(
            init["result"]["serverInfo"]["name"],
            json!("tessera"),
            "{init}"
        );
        assert!(
            init["result"]["capabilities"]["tools"].is_object(),
            "{init}"
        );
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        mcp
    }

    async fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends a request and returns its response, skipping notifications.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = tokio::time::timeout(ANSWER_WITHIN, self.lines.next_line())
                .await
                .expect("an answer in time")
                .unwrap()
                .expect("tessera mcp closed its stdout");
            let message: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    /// Calls a tool and returns its result.
    async fn tool(&mut self, name: &str, arguments: Value) -> Value {
        let answer = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        answer
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{name}: no result: {answer}"))
    }

    /// Closes stdin and waits for the server to exit by itself.
    async fn finish(mut self) {
        drop(self.stdin);
        let status = tokio::time::timeout(ANSWER_WITHIN, self.child.wait())
            .await
            .expect("tessera mcp exits when stdin closes")
            .unwrap();
        assert!(status.success(), "{status}");
    }
}

/// A successful tool result's structured content.
fn ok(result: &Value) -> &Value {
    assert_eq!(result["isError"], json!(false), "{result}");
    &result["structuredContent"]
}

/// A tool error's HTTP status and error code.
fn refused(result: &Value) -> (u64, String) {
    assert_eq!(result["isError"], json!(true), "{result}");
    let s = &result["structuredContent"];
    (
        s["status"].as_u64().unwrap_or(0),
        s["error"]["code"].as_str().unwrap_or_default().to_string(),
    )
}

/// Checks the tool list: every tool, each with an object input schema, and
/// schemas that come from the API's types.
fn check_tool_list(list: &Value) {
    let tools = list["result"]["tools"].as_array().expect("tools");
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    let mut expected = TOOLS.to_vec();
    expected.sort_unstable();
    assert_eq!(names, expected);
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], json!("object"), "{t}");
        assert_closed(&t["name"], &t["inputSchema"], "");
    }
    let schema = |name: &str| {
        tools.iter().find(|t| t["name"] == json!(name)).unwrap()["inputSchema"].clone()
    };
    let claim = schema("claim");
    for field in ["queue", "kinds", "wait_ms"] {
        assert!(
            claim["properties"][field].is_object(),
            "claim.{field}: {claim}"
        );
    }
    let put = schema("put_noun");
    for field in ["namespace", "expected_version", "visibility", "body"] {
        assert!(
            put["properties"][field].is_object(),
            "put_noun.{field}: {put}"
        );
    }
    let enqueue = schema("enqueue").to_string();
    for field in [
        "effect_class",
        "visibility_scope",
        "idempotency_key",
        "write-internal",
    ] {
        assert!(
            enqueue.contains(field),
            "enqueue schema lacks {field}: {enqueue}"
        );
    }
}

/// Asserts that every object schema with named properties in `schema`
/// (at `at`, in the tool `tool`'s input schema, `$defs` included) says
/// `additionalProperties: false`, as the API's types refuse unknown fields.
fn assert_closed(tool: &Value, schema: &Value, at: &str) {
    match schema {
        Value::Object(map) => {
            if map.contains_key("properties") {
                assert_eq!(
                    map.get("additionalProperties"),
                    Some(&json!(false)),
                    "{tool}: the object schema at `{at}` is open: {schema}"
                );
            }
            for (k, v) in map {
                assert_closed(tool, v, &format!("{at}/{k}"));
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                assert_closed(tool, v, &format!("{at}/{i}"));
            }
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tessera_mcp_on_stdio_runs_a_whole_cycle_for_a_handle_holder() {
    let t = Team::start().await;
    let key = agent_key(&t).await;
    let base = t.d.admin.base().to_string();

    let mut keyed = StdioMcp::start(&base, &[("TESSERA_KEY", &key)]).await;
    check_tool_list(&keyed.request("tools/list", json!({})).await);

    let c = ok(&keyed
        .tool(
            "put_noun",
            json!({"namespace": NS, "store": "work.contracts", "key": "mcp", "expected_version": 0, "body": contract()}),
        )
        .await)
    .clone();
    let input = ok(&keyed
        .tool(
            "put_noun",
            json!({"namespace": NS, "store": "work.inputs", "key": "mcp", "expected_version": 0, "body": {"numbers": [3, 4]}}),
        )
        .await)
    .clone();
    let pin = |v: &Value, store: &str| json!({"namespace": NS, "store": store, "key": "mcp", "version": v["version"], "sha256": v["sha256"]});
    let (c, input) = (pin(&c, "work.contracts"), pin(&input, "work.inputs"));
    let spec = spec(
        "verb.solve_draft",
        json!({"contract_ref": c, "input_ref": input}),
    );
    let enqueued = keyed.tool("enqueue", json!({"spec": spec})).await;
    let id = ok(&enqueued)["task_id"].as_str().unwrap().to_string();
    assert_eq!(
        ok(&keyed.tool("get_task", json!({"task_id": id})).await)["state"],
        json!("queued")
    );
    let claimed = keyed.tool("claim", json!({"queue": "work.external"})).await;
    let claimed = ok(&claimed);
    assert_eq!(claimed["task"]["task_id"], json!(id));
    let handle = claimed["handle"].as_str().unwrap().to_string();

    // A bad handle: a tool error carrying the API's status and code.
    let (status, code) = refused(
        &keyed
            .tool(
                "submit",
                json!({"body": "x", "handle": "wh-00000000000000000000000000"}),
            )
            .await,
    );
    assert!(status == 401 || status == 404, "{status} {code}");
    assert!(!code.is_empty());
    keyed.finish().await;

    // The agent holds only the handle.
    let mut agent = StdioMcp::start(&base, &[("TESSERA_HANDLE", &handle)]).await;
    let (status, code) = refused(&agent.tool("enqueue", json!({"spec": spec})).await);
    assert_eq!((status, code.as_str()), (401, "unauthenticated"));

    let prompt = agent.tool("get_prompt", json!({})).await;
    let prompt = ok(&prompt).clone();
    assert_eq!(prompt["task_id"], json!(id));
    assert_eq!(prompt["brief"]["input_ref"], input);
    let read = agent
        .tool("read_noun", json!({"pin": prompt["brief"]["input_ref"]}))
        .await;
    assert_eq!(ok(&read)["body"], json!({"numbers": [3, 4]}));
    assert_eq!(ok(&read)["sha256"], input["sha256"]);

    let beat = agent.tool("heartbeat", json!({})).await;
    assert!(ok(&beat)["expires_at"].is_string(), "{beat}");
    let staged = agent
        .tool(
            "stage_part",
            json!({"name": "notes.md", "content": "# Notes\n3² + 4²"}),
        )
        .await;
    assert_eq!(ok(&staged)["name"], json!("notes.md"));
    let parts = agent.tool("list_parts", json!({})).await;
    assert_eq!(ok(&parts)["parts"][0]["name"], json!("notes.md"));
    let done = agent
        .tool("submit", json!({"body": {"sum_of_squares": 25}}))
        .await;
    assert_eq!(ok(&done)["ok"], json!(true), "{done}");
    assert_eq!(ok(&done)["state"], json!("succeeded"));
    agent.finish().await;

    let view = task(&t.d.client(&key), &id).await;
    assert_eq!(view["state"], json!("succeeded"));
}

/// The protocol header of a session that negotiated 2025-11-25.
const LEGACY: &[(&str, &str)] = &[("mcp-protocol-version", "2025-11-25")];

/// A JSON-RPC exchange with `/mcp` over streamable HTTP.
struct HttpMcp {
    client: Client,
    next_id: u64,
}

impl HttpMcp {
    /// A client of `t`'s daemon's `/mcp`, its request ids from 1.
    fn on(t: &Team) -> HttpMcp {
        HttpMcp {
            client: t.d.admin.clone(),
            next_id: 1,
        }
    }

    /// Posts one JSON-RPC message as `bearer`; answers the response
    /// (from a JSON body, or the last `data:` event of an SSE body), or
    /// `Null` for an accepted notification.
    async fn post(&mut self, bearer: &str, message: Value, extra: &[(&str, &str)]) -> Value {
        let reply = self
            .client
            .with_bearer(bearer)
            .send(
                Method::POST,
                "/mcp",
                Some(serde_json::to_vec(&message).unwrap().into()),
                &[&[("accept", "application/json, text/event-stream")], extra].concat(),
            )
            .await
            .unwrap();
        assert!(
            reply.status.is_success(),
            "{}: {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        );
        if reply.body.is_empty() {
            return Value::Null;
        }
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        if reply
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"))
        {
            let data = text
                .lines()
                .rev()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .find(|d| !d.is_empty())
                .expect("an SSE data line");
            return serde_json::from_str(data).unwrap();
        }
        serde_json::from_str(&text).unwrap()
    }

    async fn request(&mut self, bearer: &str, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let answer = self.post(bearer, message, LEGACY).await;
        assert_eq!(answer["id"], json!(id), "{answer}");
        answer
    }

    async fn tool(&mut self, bearer: &str, name: &str, arguments: Value) -> Value {
        let answer = self
            .request(
                bearer,
                "tools/call",
                json!({"name": name, "arguments": arguments}),
            )
            .await;
        answer["result"].clone()
    }

    /// A request in the 2026-07-28 style, declaring the Tasks extension in
    /// its `_meta`, with the `Mcp-Method` and `Mcp-Name` headers.
    async fn with_tasks(&mut self, bearer: &str, method: &str, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "tessera-test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": {"io.modelcontextprotocol/tasks": {}}
            }
        });
        let id = self.next_id;
        self.next_id += 1;
        let name = params["name"].as_str().or(params["taskId"].as_str());
        let name = name.unwrap_or_default().to_string();
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let headers = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
            ("mcp-name", name.as_str()),
        ];
        self.post(bearer, message, &headers).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_serves_the_same_cycle_at_mcp_over_http_with_tasks() {
    let t = Team::start().await;
    let key = agent_key(&t).await;
    let mut mcp = HttpMcp::on(&t);

    let init = mcp
        .request(
            &key,
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "tessera-test", "version": "1"}
            }),
        )
        .await;
    assert_eq!(
        init["result"]["serverInfo"]["name"],
        json!("tessera"),
        "{init}"
    );
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    mcp.post(&key, initialized, LEGACY).await;
    check_tool_list(&mcp.request(&key, "tools/list", json!({})).await);

    let c = put_noun(&t.requester, "work.contracts", "mcp", contract()).await;
    let input = put_noun(
        &t.requester,
        "work.inputs",
        "mcp",
        json!({"numbers": [3, 4]}),
    )
    .await;
    let spec = spec(
        "verb.solve_draft",
        json!({"contract_ref": c, "input_ref": input}),
    );

    // Enqueued by a client with the Tasks extension: an MCP task whose id
    // is the Tessera task's, working while the task waits.
    let created = mcp
        .with_tasks(
            &key,
            "tools/call",
            json!({"name": "enqueue", "arguments": {"spec": spec}}),
        )
        .await;
    let created = &created["result"];
    assert_eq!(created["resultType"], json!("task"), "{created}");
    assert_eq!(created["status"], json!("working"));
    let id = created["taskId"].as_str().unwrap().to_string();
    assert_eq!(task(&t.d.client(&key), &id).await["state"], json!("queued"));

    let claimed = mcp
        .tool(&key, "claim", json!({"queue": "work.external"}))
        .await;
    let handle = ok(&claimed)["handle"].as_str().unwrap().to_string();

    // The handle as the bearer: the worker tools need no argument.
    let (status, code) = refused(
        &mcp.tool(
            &handle,
            "put_noun",
            json!({"namespace": NS, "store": "s", "key": "k", "body": {}}),
        )
        .await,
    );
    assert_eq!((status, code.as_str()), (401, "unauthenticated"));
    let prompt = mcp.tool(&handle, "get_prompt", json!({})).await;
    assert_eq!(ok(&prompt)["task_id"], json!(id));
    let read = mcp
        .tool(
            &handle,
            "read_noun",
            json!({"pin": ok(&prompt)["brief"]["input_ref"]}),
        )
        .await;
    assert_eq!(ok(&read)["body"], json!({"numbers": [3, 4]}));
    assert!(ok(&mcp.tool(&handle, "heartbeat", json!({})).await)["expires_at"].is_string());
    let staged = mcp
        .tool(
            &handle,
            "stage_part",
            json!({"name": "notes.md", "content": "# Notes"}),
        )
        .await;
    assert_eq!(ok(&staged)["size"], json!(7));
    let parts = mcp.tool(&handle, "list_parts", json!({})).await;
    assert_eq!(ok(&parts)["parts"][0]["name"], json!("notes.md"));

    // A bad part name is the API's 400, as a tool error.
    let (status, _) = refused(
        &mcp.tool(
            &handle,
            "stage_part",
            json!({"name": "../x", "content": "x"}),
        )
        .await,
    );
    assert_eq!(status, 400);

    let got = mcp
        .with_tasks(&key, "tasks/get", json!({"taskId": id}))
        .await;
    assert_eq!(got["result"]["status"], json!("working"), "{got}");

    let done = mcp
        .tool(
            &handle,
            "submit",
            json!({"body": "{\"sum_of_squares\": 25}", "handle": handle}),
        )
        .await;
    assert_eq!(ok(&done)["state"], json!("succeeded"), "{done}");
    assert_eq!(
        task(&t.d.client(&key), &id).await["state"],
        json!("succeeded")
    );

    let got = mcp
        .with_tasks(&key, "tasks/get", json!({"taskId": id}))
        .await;
    let got = &got["result"];
    assert_eq!(got["status"], json!("completed"), "{got}");
    let output = &got["result"]["structuredContent"]["output"];
    assert_eq!(output["out"], json!({"sum_of_squares": 25}), "{got}");

    // Not JSON-RPC, or not a POST: a client error, never a 500.
    let accept = [("accept", "application/json, text/event-stream")];
    let garbled =
        t.d.admin
            .send(Method::POST, "/mcp", Some("{not json".into()), &accept)
            .await
            .unwrap();
    assert!(garbled.status.is_client_error(), "{}", garbled.status);
    let get =
        t.d.admin
            .send(Method::GET, "/mcp", None, &accept)
            .await
            .unwrap();
    assert!(get.status.is_client_error(), "{}", get.status);
    // Refusals carry this API's error body, and a client that names no
    // media types (no Accept) is answered in JSON rather than refused.
    let plain = [("content-type", "text/plain")];
    let wrong_type =
        t.d.admin
            .send(Method::POST, "/mcp", Some("{}".into()), &plain)
            .await
            .unwrap();
    assert!(wrong_type.status.is_client_error(), "{}", wrong_type.status);
    assert!(
        wrong_type.error_code().is_some(),
        "{}",
        String::from_utf8_lossy(&wrong_type.body)
    );
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    let no_accept =
        t.d.admin
            .send(Method::POST, "/mcp", Some(ping.to_string().into()), &[])
            .await
            .unwrap();
    assert_eq!(
        no_accept.status.as_u16(),
        200,
        "{}",
        String::from_utf8_lossy(&no_accept.body)
    );
    let pong: Value = serde_json::from_slice(&no_accept.body).expect("a JSON-RPC answer");
    assert_eq!(pong["id"], json!(9), "{pong}");

    // A task the key may not see: a JSON-RPC error, not a leak.
    let missing = mcp
        .with_tasks(&key, "tasks/get", json!({"taskId": "t999999"}))
        .await;
    assert_eq!(missing["error"]["code"], json!(-32602), "{missing}");
    assert_eq!(missing["error"]["data"]["status"], json!(404));
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_cancel_over_mcp_cancels_the_tessera_task() {
    let t = Team::start().await;
    let key = agent_key(&t).await;
    let mut mcp = HttpMcp::on(&t);
    let spec = spec("verb.solve_draft", json!({}));
    let created = mcp
        .with_tasks(
            &key,
            "tools/call",
            json!({"name": "enqueue", "arguments": {"spec": spec}}),
        )
        .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_string();

    let ack = mcp
        .with_tasks(&key, "tasks/cancel", json!({"taskId": id}))
        .await;
    assert!(ack.get("error").is_none(), "{ack}");
    assert_eq!(
        task(&t.d.client(&key), &id).await["state"],
        json!("cancelled")
    );
    let got = mcp
        .with_tasks(&key, "tasks/get", json!({"taskId": id}))
        .await;
    assert_eq!(got["result"]["status"], json!("cancelled"), "{got}");

    // A task the key cannot see: a JSON-RPC error carrying the 404.
    let refused = mcp
        .with_tasks(&key, "tasks/cancel", json!({"taskId": "t999999"}))
        .await;
    assert_eq!(refused["error"]["data"]["status"], json!(404), "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parked_tessera_task_reads_as_input_required_over_mcp() {
    let t = Team::start().await;
    let key = agent_key(&t).await;
    let mut mcp = HttpMcp::on(&t);
    let spec = spec("verb.solve_draft", json!({}));
    let created = mcp
        .with_tasks(
            &key,
            "tools/call",
            json!({"name": "enqueue", "arguments": {"spec": spec}}),
        )
        .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_string();
    let got = mcp
        .with_tasks(&key, "tasks/get", json!({"taskId": id}))
        .await;
    assert_eq!(got["result"]["status"], json!("working"), "{got}");

    let agent = t.d.client(&key);
    let c = claim(&agent, "work.external").await.expect("the task");
    assert_eq!(claimed_id(&c), id);
    let park = json!({"lease_id": lease(&c), "reason": "needs a reviewer's answer"});
    let r = agent
        .post_json(&format!("/v1/tasks/{id}/park"), &park)
        .await
        .unwrap();
    assert_status!(r, 200);
    let got = mcp
        .with_tasks(&key, "tasks/get", json!({"taskId": id}))
        .await;
    assert_eq!(got["result"]["status"], json!("input_required"), "{got}");
}

/// JSON text nested `depth` levels deep: arrays around an empty object.
fn nested(depth: usize) -> String {
    format!("{}{{}}{}", "[".repeat(depth - 1), "]".repeat(depth - 1))
}

/// A `tools/call` of `put_noun` whose noun body nests `depth` levels (so
/// the whole message nests `depth + 3`), as text: serde_json builds no
/// value past 128 levels.
fn deep_request(depth: usize) -> String {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "put_noun",
        "arguments": {"namespace": NS, "store": "work.inputs", "key": "deep", "expected_version": 0, "body": "BODY"}
    }});
    call.to_string().replace("\"BODY\"", &nested(depth))
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_refuses_a_body_it_cannot_read_with_the_api_s_own_code() {
    let t = Team::start().await;
    let key = agent_key(&t).await;
    let accept = [
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let post = |path: &'static str, body: String| {
        let c = t.d.client(&key);
        async move {
            c.send(Method::POST, path, Some(body.into()), &accept)
                .await
                .unwrap()
        }
    };
    let answer = |r: &tessera::client::Reply| (r.status.as_u16(), r.error_code());

    // Past the JSON-RPC reader's own limit (128 levels), past the API's
    // limit, and not JSON at all: /mcp answers what the API answers the
    // same bytes.
    for bytes in [deep_request(200), deep_request(129), "{not json".into()] {
        let api = post("/v1/tasks", bytes.clone()).await;
        let mcp = post("/mcp", bytes.clone()).await;
        assert_eq!(
            answer(&mcp),
            answer(&api),
            "{}",
            String::from_utf8_lossy(&mcp.body)
        );
        assert!(
            answer(&api).0 == 400,
            "{}",
            String::from_utf8_lossy(&api.body)
        );
    }
    assert_eq!(
        answer(&post("/mcp", deep_request(200)).await),
        (400, Some("too_deep".into()))
    );
    // JSON, but no JSON-RPC message.
    let not_rpc = post("/mcp", json!({"numbers": [1]}).to_string()).await;
    assert_eq!(answer(&not_rpc), (400, Some("invalid_body".into())));

    // Within what the reader takes but past the API's limit: the tool's
    // route refuses the noun body, as the route does over HTTP.
    let deep: Value = serde_json::from_str(&nested(100)).unwrap();
    let put = json!({"expected_version": 0, "body": deep});
    let api =
        t.d.client(&key)
            .put_json(&format!("/v1/nouns/{NS}/work.inputs/deep"), &put)
            .await
            .unwrap();
    assert_status!(api, 400, "too_deep");
    let r = post("/mcp", deep_request(100)).await;
    assert_status!(r, 200);
    assert_eq!(refused(&body(&r)["result"]), (400, "too_deep".into()));
    let mut stdio = StdioMcp::start(t.d.admin.base(), &[("TESSERA_KEY", &key)]).await;
    let args = json!({"namespace": NS, "store": "work.inputs", "key": "deep", "expected_version": 0, "body": deep});
    assert_eq!(
        refused(&stdio.tool("put_noun", args).await),
        (400, "too_deep".into())
    );
    stdio.finish().await;
}

/// One MCP transport a test drives the same way: `/mcp` with a bearer, or
/// a `tessera mcp` child on stdio.
enum Mcp {
    Http(HttpMcp, String),
    Stdio(StdioMcp),
}

impl Mcp {
    async fn tool(&mut self, name: &str, arguments: Value) -> Value {
        match self {
            Mcp::Http(mcp, bearer) => mcp.tool(bearer, name, arguments).await,
            Mcp::Stdio(mcp) => mcp.tool(name, arguments).await,
        }
    }

    async fn tools(&mut self) -> Value {
        match self {
            Mcp::Http(mcp, bearer) => mcp.request(bearer, "tools/list", json!({})).await,
            Mcp::Stdio(mcp) => mcp.request("tools/list", json!({})).await,
        }
    }
}

/// The HTTP request a tool's route gets: method, path, JSON body.
type Route<'a> = (Method, &'a str, Value);

#[tokio::test(flavor = "multi_thread")]
async fn every_tool_refuses_an_unknown_argument_as_its_route_refuses_an_unknown_field() {
    let t = Team::start().await;
    let key = agent_key(&t).await;
    let agent = t.d.client(&key);
    let first = enqueue(&agent, &spec("verb.solve_draft", json!({"n": 1}))).await;
    let claimed = claim(&agent, "work.external").await.expect("a task");
    assert_eq!(claimed_id(&claimed), first);
    let handle = claimed["handle"].as_str().unwrap().to_string();
    let waiting = enqueue(&agent, &spec("verb.solve_draft", json!({"n": 2}))).await;
    let input = put_noun(&t.requester, "work.inputs", "typos", json!({"n": 1})).await;
    let mut typo_spec = spec("verb.solve_draft", json!({"n": 3}));
    typo_spec["priorty"] = json!(5);
    let queue_path = "/v1/queues/work.external/claim";
    let noun_path = format!("/v1/nouns/{NS}/work.inputs/typo");

    // Each tool, arguments with one field it does not have, and the request
    // its route gets with the same body, where the tool has a body route.
    let h = handle.as_str();
    let cases: Vec<(&str, Value, &str, Option<Route>)> = vec![
        (
            "claim",
            json!({"queue": "work.external", "kind": ["verb.solve_draft"]}),
            "kind",
            Some((
                Method::POST,
                queue_path,
                json!({"kind": ["verb.solve_draft"]}),
            )),
        ),
        (
            "claim",
            json!({"queue": "work.external", "wait_ms": 0, "maximum": 2}),
            "maximum",
            Some((
                Method::POST,
                queue_path,
                json!({"wait_ms": 0, "maximum": 2}),
            )),
        ),
        (
            "enqueue",
            json!({"spec": typo_spec}),
            "priorty",
            Some((Method::POST, "/v1/tasks", typo_spec.clone())),
        ),
        (
            "enqueue",
            json!({"spec": spec("verb.solve_draft", json!({})), "dry_run": true}),
            "dry_run",
            None,
        ),
        (
            "get_task",
            json!({"task_id": first, "verbose": true}),
            "verbose",
            None,
        ),
        (
            "put_noun",
            json!({"namespace": NS, "store": "work.inputs", "key": "typo", "expected_version": 0, "body": {}, "visiblity": "private"}),
            "visiblity",
            Some((
                Method::PUT,
                noun_path.as_str(),
                json!({"expected_version": 0, "body": {}, "visiblity": "private"}),
            )),
        ),
        (
            "get_prompt",
            json!({"handle": h, "verbose": true}),
            "verbose",
            None,
        ),
        (
            "read_noun",
            json!({"handle": h, "pin": input, "as_of": 1}),
            "as_of",
            None,
        ),
        (
            "read_noun",
            json!({"handle": h, "pin": {"store": "work.inputs", "key": "typos", "version": 1, "sha256": input["sha256"], "namespce": NS}}),
            "namespce",
            None,
        ),
        (
            "heartbeat",
            json!({"handle": h, "lease_id": lease(&claimed)}),
            "lease_id",
            None,
        ),
        (
            "stage_part",
            json!({"handle": h, "name": "notes.md", "content": "x", "media_type": "text/plain"}),
            "media_type",
            None,
        ),
        ("list_parts", json!({"handle": h, "all": true}), "all", None),
        (
            "submit",
            json!({"handle": h, "body": "x", "okay": false}),
            "okay",
            None,
        ),
    ];

    let mut transports = vec![
        Mcp::Http(HttpMcp::on(&t), key.clone()),
        Mcp::Stdio(StdioMcp::start(t.d.admin.base(), &[("TESSERA_KEY", &key)]).await),
    ];
    for mcp in &mut transports {
        for tool in mcp.tools().await["result"]["tools"].as_array().unwrap() {
            assert_closed(&tool["name"], &tool["inputSchema"], "");
        }
        for (name, args, field, route) in &cases {
            let result = mcp.tool(name, args.clone()).await;
            assert_eq!(
                refused(&result),
                (400, "unknown_field".to_string()),
                "{name} {args}"
            );
            let details = &result["structuredContent"]["error"]["details"];
            assert_eq!(details["field"], json!(field), "{name}: {result}");
            if let Some((method, path, sent)) = route {
                let r = agent
                    .send(method.clone(), path, Some(sent.to_string().into()), &[])
                    .await
                    .unwrap();
                assert_status!(r, 400, "unknown_field");
                assert_eq!(body(&r)["error"]["details"]["field"], json!(field));
            }
        }
    }
    if let Mcp::Stdio(stdio) = transports.pop().unwrap() {
        stdio.finish().await;
    }

    // Nothing any of them asked for happened.
    assert_eq!(task(&agent, &waiting).await["state"], json!("queued"));
    assert_eq!(task(&agent, &waiting).await["attempt"], json!(0));
    assert_eq!(task(&agent, &first).await["state"], json!("claimed"));
    let typo = agent.get(&noun_path).await.unwrap();
    assert_status!(typo, 404);
    let parts = t.d.client(&handle).get("/v1/worker/parts").await.unwrap();
    assert_eq!(body(&parts)["parts"], json!([]), "{}", body(&parts));
    let queues = body(&agent.get("/v1/queues").await.unwrap());
    let external = queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == json!("work.external"))
        .expect("work.external")
        .clone();
    assert_eq!(external["counts"]["queued"], json!(1), "{external}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_claim_tool_answers_a_thin_claim_without_the_brief() {
    let t = Team::start().await;
    let key = agent_key(&t).await;
    let mut mcp = HttpMcp::on(&t);
    let secret = "read-only-by-the-agent";
    let id = enqueue(
        &t.requester,
        &spec("verb.solve_draft", json!({"secret": secret})),
    )
    .await;
    let claimed = mcp
        .tool(
            &key,
            "claim",
            json!({"queue": "work.external", "thin": true}),
        )
        .await;
    let thin = ok(&claimed).clone();
    assert!(!claimed.to_string().contains(secret), "{claimed}");
    assert_eq!(thin["task_id"], json!(id));
    assert!(
        thin.get("task").is_none() && thin.get("token").is_none(),
        "{thin}"
    );
    let handle = thin["handle"].as_str().unwrap();
    let prompt = mcp.tool(handle, "get_prompt", json!({})).await;
    assert_eq!(ok(&prompt)["brief"]["secret"], json!(secret));
}

/// Enqueues a task over `/mcp` as `key` (an MCP task), then claims it
/// and submits output its contract refuses, so it fails; answers its id.
async fn fail_a_task(t: &Team, mcp: &mut HttpMcp, key: &str) -> String {
    let c = put_noun(&t.requester, "work.contracts", "mcp", contract()).await;
    let input = put_noun(&t.requester, "work.inputs", "mcp", json!({"numbers": [1]})).await;
    let spec = spec(
        "verb.solve_draft",
        json!({"contract_ref": c, "input_ref": input}),
    );
    let created = mcp
        .with_tasks(
            key,
            "tools/call",
            json!({"name": "enqueue", "arguments": {"spec": spec}}),
        )
        .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_string();
    let claimed = claim(&t.d.client(key), "work.external").await.unwrap();
    let handle = claimed["handle"].as_str().unwrap();
    let r =
        t.d.client(handle)
            .post_bytes("/v1/worker/submit?ok=true", r#"{"wrong": 1}"#)
            .await
            .unwrap();
    assert!(
        r.status.is_success(),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(task(&t.d.client(key), &id).await["state"], json!("failed"));
    id
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_task_reads_over_mcp_with_its_reason_and_failed_checks() {
    let t = Team::start().await;
    let key = agent_key(&t).await;
    let mut mcp = HttpMcp::on(&t);
    let id = fail_a_task(&t, &mut mcp, &key).await;

    let got = mcp
        .with_tasks(&key, "tasks/get", json!({"taskId": id}))
        .await;
    let got = &got["result"];
    assert_eq!(got["status"], json!("failed"), "{got}");
    let message = got["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("check output_matches_schema failed")
            && message.contains("failed checks: output_matches_schema"),
        "{got}"
    );
    let checks = &got["error"]["data"]["failed_checks"];
    assert_eq!(checks[0]["name"], json!("output_matches_schema"), "{got}");
    assert_eq!(checks[0]["ok"], json!(false), "{got}");
    assert_eq!(got["statusMessage"], json!(message), "{got}");
}

/// `tasks/get` on a failed task read its receipts for the last one's
/// checks and, when that read failed, answered a JSON-RPC error instead
/// of the task. It now answers the failed task from its view alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_task_whose_receipts_cannot_be_read_still_reads_as_failed() {
    if !embedded() {
        eprintln!(
            "skipped: receipts are damaged in the root's packs, which the embedded backend writes"
        );
        return;
    }
    let t = Team::start().await;
    let key = agent_key(&t).await;
    let mut mcp = HttpMcp::on(&t);
    let id = fail_a_task(&t, &mut mcp, &key).await;
    let receipt = task(&t.d.client(&key), &id).await["receipts"][0]
        .as_str()
        .unwrap()
        .to_string();
    damage_packed(t.d.root.path(), &receipt).await;
    let r =
        t.d.client(&key)
            .get(&format!("/v1/tasks/{id}/receipts"))
            .await
            .unwrap();
    assert_status!(r, 500, "corrupt_object");

    let got = mcp
        .with_tasks(&key, "tasks/get", json!({"taskId": id}))
        .await;
    let got = &got["result"];
    assert_eq!(got["status"], json!("failed"), "{got}");
    let message = got["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("the task failed: "), "{got}");
    let data = &got["error"]["data"];
    assert_eq!(data["receipt"], json!(receipt), "{got}");
    assert_eq!(data["failed_checks"], json!([]), "{got}");
    assert!(
        data["receipt_unread"]
            .as_str()
            .is_some_and(|why| why.contains("fsck")),
        "{got}"
    );
}

/// Changes one byte of the object `sha` (hex) where the daemon on `root`
/// packed it, once it has (it packs off the request path).
async fn damage_packed(root: &std::path::Path, sha: &str) {
    use std::io::{Seek, SeekFrom, Write};
    let raw: Vec<u8> = (0..sha.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&sha[i..i + 2], 16).unwrap())
        .collect();
    for _ in 0..100 {
        let packs = std::fs::read_dir(root.join("objects/packs"))
            .into_iter()
            .flatten();
        for path in packs.flatten().map(|e| e.path()) {
            if path.extension().is_none_or(|x| x != "pack") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let Some(at) = bytes.windows(raw.len()).position(|w| w == raw) else {
                continue;
            };
            let payload = (at + raw.len()) as u64;
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.seek(SeekFrom::Start(payload)).unwrap();
            f.write_all(b"X").unwrap();
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("object {sha} was never packed under {}", root.display());
}

/// A tool error's message.
fn message(result: &Value) -> String {
    result["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handle_with_a_control_character_is_malformed_not_unreachable_on_both_transports() {
    let t = Team::start().await;
    let key = agent_key(&t).await;
    let bad = json!({"handle": "wh-abc\u{1}def"});
    let said = "the handle is malformed: character 7 is U+0001 (a control character)";

    let mut stdio = StdioMcp::start(t.d.admin.base(), &[("TESSERA_KEY", &key)]).await;
    let got = stdio.tool("get_prompt", bad.clone()).await;
    assert_eq!(refused(&got), (401, "unauthenticated".to_string()), "{got}");
    assert!(message(&got).contains(said), "{got}");
    stdio.finish().await;

    let mut http = HttpMcp::on(&t);
    let got = http.tool(&key, "get_prompt", bad).await;
    assert_eq!(refused(&got), (401, "unauthenticated".to_string()), "{got}");
    assert!(message(&got).contains(said), "{got}");
}

/// The Tasks extension, as a client declares it.
fn tasks_extension() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// The shape of a `tools/call` answer: an MCP task (with its status), or
/// a tool result (with its structured content's fields).
fn shape(answer: &Value) -> Value {
    let result = &answer["result"];
    if result["resultType"] == json!("task") {
        return json!({"task": result["status"]});
    }
    let mut fields: Vec<&String> = result["structuredContent"]
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    fields.sort();
    json!({"tool": fields, "isError": result["isError"]})
}

#[tokio::test(flavor = "multi_thread")]
async fn enqueue_answers_the_same_shape_over_stdio_and_http() {
    let t = Team::start().await;
    let key = agent_key(&t).await;
    // A client that declares the Tasks extension at initialize, on both.
    let mut stdio = StdioMcp::start_declaring(
        t.d.admin.base(),
        &[("TESSERA_KEY", &key)],
        tasks_extension(),
    )
    .await;
    let mut http = HttpMcp::on(&t);
    let init = json!({
        "protocolVersion": "2025-11-25",
        "capabilities": tasks_extension(),
        "clientInfo": {"name": "tessera-test", "version": "1"}
    });
    http.request(&key, "initialize", init).await;

    let spec = spec("verb.solve_draft", json!({}));
    let plain = json!({"name": "enqueue", "arguments": {"spec": spec}});
    let mut declaring = plain.clone();
    declaring["_meta"] = json!({"io.modelcontextprotocol/clientCapabilities": tasks_extension()});
    let cases = [
        (
            plain,
            json!({"tool": ["created", "state", "task_id"], "isError": false}),
        ),
        (declaring, json!({"task": "working"})),
    ];
    for (params, want) in cases {
        let over_stdio = stdio.request("tools/call", params.clone()).await;
        let over_http = http.request(&key, "tools/call", params.clone()).await;
        assert_eq!(shape(&over_stdio), want, "stdio: {over_stdio}");
        assert_eq!(shape(&over_http), want, "http: {over_http}");
    }
    stdio.finish().await;
}

/// The MCP Inspector's own flags
/// (`npx @modelcontextprotocol/inspector [flags] command args...`): a flag
/// of `tessera mcp` named like one is taken by the Inspector.
const INSPECTOR_FLAGS: [&str; 10] = [
    "--server",
    "--config",
    "-e",
    "--cli",
    "--method",
    "--tool-name",
    "--tool-arg",
    "--transport",
    "--header",
    "--target",
];

#[test]
fn tessera_mcp_s_flags_are_not_the_mcp_inspector_s() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["mcp", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("--daemon <URL>"), "{help}");
    let flags: Vec<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with('-'))
        .map(|w| w.trim_end_matches([',', '.', ')']))
        .collect();
    for theirs in INSPECTOR_FLAGS {
        assert!(
            !flags.contains(&theirs),
            "tessera mcp --help offers {theirs}: {help}"
        );
    }
}
