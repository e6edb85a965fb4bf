// Live updates for the overview page, run as a dedicated module worker.
//
// The page posts {type: "start", key}. The worker reads GET /v1/events
// (Server-Sent Events) with the key as a bearer header, which EventSource
// cannot send, so the stream is read with fetch() and parsed here. It
// posts to the page:
//   {type: "mode", mode: "live" | "polling" | "reconnecting" | "refused", detail}
//   {type: "change", event, id, data}   an event arrived (data parsed JSON, or the text)
//   {type: "change", event: "poll"}      polling: every 3 s, refresh the view
// A daemon without the events route (404) is polled instead.
//
// The stream lives in a worker rather than the page so that a request that
// never ends is not the page's: the page's own requests all finish, which
// also lets headless browsers (the site's test) decide the page is loaded.

const POLL_MS = 3000;

let key = "";
let lastEventId = "";
let retryMs = 3000;
let pollTimer = null;

onmessage = (e) => {
  if (e.data && e.data.type === "start" && !key) {
    key = String(e.data.key);
    connect();
  }
};

function mode(name, detail) {
  postMessage({ type: "mode", mode: name, detail: detail || "" });
}

function startPolling(detail) {
  mode("polling", detail);
  if (pollTimer === null) {
    pollTimer = setInterval(() => postMessage({ type: "change", event: "poll" }), POLL_MS);
  }
}

function reconnectLater(detail) {
  mode("reconnecting", detail);
  setTimeout(connect, retryMs);
}

async function connect() {
  const headers = { Authorization: "Bearer " + key, Accept: "text/event-stream" };
  if (lastEventId) {
    headers["Last-Event-ID"] = lastEventId;
  }
  let resp;
  try {
    resp = await fetch("/v1/events", { headers, cache: "no-store" });
  } catch (err) {
    reconnectLater("the daemon could not be reached");
    return;
  }
  if (resp.status === 404 || resp.status === 405) {
    startPolling("this daemon has no /v1/events; refreshing every 3 s");
    return;
  }
  if (resp.status === 401 || resp.status === 403) {
    mode("refused", "the events stream refused this key (" + resp.status + ")");
    return;
  }
  const type = resp.headers.get("content-type") || "";
  if (!resp.ok || !type.startsWith("text/event-stream") || !resp.body) {
    reconnectLater("the events stream answered " + resp.status);
    return;
  }
  mode("live", "");
  // Anything may have changed while we were not connected.
  postMessage({ type: "change", event: "connected" });
  try {
    await readEvents(resp.body, dispatch);
  } catch (err) {
    // A dropped connection: reconnect below, resuming from lastEventId.
  }
  reconnectLater("the events stream ended");
}

function dispatch(ev) {
  let data = ev.data;
  try {
    data = JSON.parse(ev.data);
  } catch (err) {
    // Not JSON: hand the text on as it is.
  }
  postMessage({ type: "change", event: ev.event, id: ev.id, data });
}

// Reads an SSE body (the WHATWG "event stream interpretation"): lines end
// with CRLF, LF or CR; a blank line ends an event; ":" starts a comment;
// a field is "name: value" (one space after the colon is dropped).
async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let first = true;
  let event = "";
  let data = [];
  // The id applies once its event is complete, so a half-received event
  // is asked for again after a reconnect.
  let idBuffer = lastEventId;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      return;
    }
    buf += value;
    if (first && buf.length > 0) {
      first = false;
      if (buf.charCodeAt(0) === 0xfeff) {
        buf = buf.slice(1);
      }
    }
    for (;;) {
      const end = buf.search(/\r\n|\n|\r/);
      // A CR at the very end may be the first half of a CRLF: wait for more.
      if (end < 0 || (end === buf.length - 1 && buf[end] === "\r")) {
        break;
      }
      const line = buf.slice(0, end);
      buf = buf.slice(buf.startsWith("\r\n", end) ? end + 2 : end + 1);
      if (line === "") {
        lastEventId = idBuffer;
        if (data.length > 0) {
          onEvent({ event: event || "message", id: lastEventId, data: data.join("\n") });
        }
        event = "";
        data = [];
        continue;
      }
      if (line.startsWith(":")) {
        continue;
      }
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? "" : line.slice(colon + 1);
      if (val.startsWith(" ")) {
        val = val.slice(1);
      }
      if (field === "event") {
        event = val;
      } else if (field === "data") {
        data.push(val);
      } else if (field === "id" && !val.includes("\0")) {
        idBuffer = val;
      } else if (field === "retry" && /^\d+$/.test(val)) {
        retryMs = Number(val);
      }
    }
  }
}
