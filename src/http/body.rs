//! Response bodies: whole bytes for every route but one, and for the event
//! stream chunks handed over by the task that writes it.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Frame;
use tokio::sync::mpsc;

/// A response body.
pub type Body = Either<Full<Bytes>, Chunks>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Either::Left(Full::new(bytes.into()))
}

/// A body of chunks sent on a channel; it ends when the sender is dropped.
#[derive(Debug)]
pub struct Chunks(mpsc::Receiver<Bytes>);

impl Chunks {
    /// A body and the sender that feeds it (holding at most `depth` chunks
    /// the client has not read yet).
    pub fn channel(depth: usize) -> (mpsc::Sender<Bytes>, Body) {
        let (tx, rx) = mpsc::channel(depth);
        (tx, Either::Right(Chunks(rx)))
    }
}

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    }
}
