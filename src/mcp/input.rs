//! The end of a session's input, for a server that reads its requests
//! from one stream (`tessera mcp` on stdio). A client closes that stream
//! to shut the session down, and it closes by itself when the client
//! exits; a `claim` still waiting then would take a task for a client that
//! will never read the answer, so it stops and answers that nothing was
//! claimed, as the daemon's long polls do when it stops. Other tool calls
//! in flight finish and are answered as usual.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;

/// A reader that tells its [`InputEnd`] when it reaches its end, fails, or
/// is dropped (the transport reading it has stopped).
#[derive(Debug)]
pub struct Watched<R> {
    inner: R,
    ended: watch::Sender<bool>,
}

/// Resolves once a session's input has ended. Cheap to clone.
#[derive(Clone, Debug)]
pub struct InputEnd(Option<watch::Receiver<bool>>);

/// `reader`, watched for its end.
pub fn watch_input<R: AsyncRead + Unpin>(reader: R) -> (Watched<R>, InputEnd) {
    let (ended, end) = watch::channel(false);
    (
        Watched {
            inner: reader,
            ended,
        },
        InputEnd(Some(end)),
    )
}

impl InputEnd {
    /// The end of an input that never ends: a server whose requests each
    /// stand alone (`/mcp`, where a request's own connection says when its
    /// client has gone).
    pub fn never() -> InputEnd {
        InputEnd(None)
    }

    /// Waits for the end (forever, for [`InputEnd::never`]).
    pub async fn ended(&self) {
        match &self.0 {
            // A sender dropped without saying so ended too.
            Some(end) => drop(end.clone().wait_for(|ended| *ended).await),
            None => std::future::pending().await,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Watched<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        let end = match &read {
            Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if end {
            this.ended.send_replace(true);
        }
        read
    }
}

impl<R> Drop for Watched<R> {
    fn drop(&mut self) {
        self.ended.send_replace(true);
    }
}
