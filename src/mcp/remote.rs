//! [`Api`] over HTTP: how `tessera mcp` (stdio) reaches a running daemon.

use super::{Api, ApiCall, ApiReply, Pending};
use crate::client::Client;

/// The daemon at a base URL, reached with the crate's HTTP client.
#[derive(Clone, Debug)]
pub struct Remote(pub Client);

impl Api for Remote {
    fn send(&self, call: ApiCall, _origin: Option<&http::request::Parts>) -> Pending {
        let client = match &call.bearer {
            Some(b) => self.0.with_bearer(b),
            None => self.0.anonymous(),
        };
        Box::pin(async move {
            let reply = client
                .send(call.method, &call.path, call.body, &[])
                .await
                .map_err(|e| e.to_string())?;
            Ok(ApiReply {
                status: reply.status,
                headers: reply.headers,
                body: reply.body,
            })
        })
    }
}
