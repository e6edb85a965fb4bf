//! A small Chrome DevTools Protocol driver for the site tests that need to
//! act in the page (press a button, then look), which `--dump-dom` cannot:
//! one headless Chromium speaking CDP over `--remote-debugging-pipe`
//! (messages as JSON, each ended by a NUL byte, read on its fd 3 and
//! written on its fd 4, here its stdin and stdout), one page attached.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// How long one protocol call may take.
const CALL_LIMIT: Duration = Duration::from_secs(30);

/// A headless Chromium with one page, killed (its whole process group)
/// when dropped.
pub struct Browser {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium on `about:blank` with a fresh profile and attaches
    /// to its page.
    pub async fn launch() -> Browser {
        super::require_chromium();
        let profile = tempfile::tempdir().expect("profile dir");
        // The shell moves our stdin and stdout to the fds the pipe mode
        // uses, then runs the browser with nothing on its own stdio.
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null"#)
            .arg(super::CHROMIUM)
            .args(super::CHROMIUM_FLAGS)
            .arg("--remote-debugging-pipe")
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("start chromium");
        let to = child.stdin.take().expect("stdin");
        let from = BufReader::new(child.stdout.take().expect("stdout"));
        let mut b = Browser {
            child,
            to,
            from,
            next_id: 1,
            session: String::new(),
            _profile: profile,
        };
        let deadline = Instant::now() + CALL_LIMIT;
        let target = loop {
            let targets = b.call(None, "Target.getTargets", json!({})).await;
            let page = targets["targetInfos"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["type"] == "page")
                .map(|t| t["targetId"].clone());
            if let Some(id) = page {
                break id;
            }
            assert!(Instant::now() < deadline, "chromium opened no page");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let attached = b
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
            )
            .await;
        b.session = attached["sessionId"].as_str().expect("a session").into();
        b.page("Page.enable", json!({})).await;
        b
    }

    /// Sends one command (to the browser, or to the page's `session`) and
    /// answers its result, skipping the events that arrive meanwhile.
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        let answer = tokio::time::timeout(CALL_LIMIT, async {
            self.to.write_all(&bytes).await.expect("write to chromium");
            loop {
                let mut buf = Vec::new();
                let n = self.from.read_until(0, &mut buf).await.expect("read");
                assert!(n > 0, "chromium closed its pipe during {method}");
                buf.pop();
                let v: Value = serde_json::from_slice(&buf).expect("CDP JSON");
                if v["id"] == json!(id) {
                    break v;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("chromium did not answer {method} within {CALL_LIMIT:?}"));
        assert!(answer["error"].is_null(), "{method}: {answer}");
        answer["result"].clone()
    }

    async fn page(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.call(Some(&session), method, params).await
    }

    /// Loads `url` as a new document (by way of `about:blank`, so nothing
    /// of the previous document can answer for it).
    pub async fn open(&mut self, url: &str) {
        for u in ["about:blank", url] {
            self.page("Page.navigate", json!({"url": u})).await;
        }
    }

    /// The value of `expression` evaluated in the page (promises awaited).
    pub async fn eval(&mut self, expression: &str) -> Value {
        let r = self
            .page(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        assert!(
            r["exceptionDetails"].is_null(),
            "{expression}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Lays the page out in a viewport of `width` by `height` CSS pixels
    /// (a window cannot be made narrower than 500 px, a phone's screen is).
    pub async fn set_viewport(&mut self, width: u32, height: u32) {
        self.page(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        )
        .await;
    }

    /// A PNG of the page's viewport.
    pub async fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine;
        let shot = self
            .page("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("PNG data"))
            .expect("base64 PNG")
    }

    /// Waits until `condition` (JavaScript) holds in the page.
    pub async fn wait_for(&mut self, condition: &str) {
        let deadline = Instant::now() + CALL_LIMIT;
        while self.eval(&format!("!!({condition})")).await != json!(true) {
            assert!(
                Instant::now() < deadline,
                "the page never got to {condition}: {}",
                self.eval("document.body ? document.body.outerHTML : ''")
                    .await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32))
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}
