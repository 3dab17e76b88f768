//! One connection to one server: the socket, a writer task, framing, request ids.
//!
//! Reading is done by whoever owns the session (the client's actor) through
//! [`Session::next_message`], which is cancel-safe: it can sit in a `select!` and lose nothing.
//!
//! Every step of setting a session up is bounded by the connect timeout ([`Session::connect`],
//! [`Session::call`]): a server that accepts a connection and then answers nothing (stopped with
//! SIGSTOP, or a RAFT member busy compacting its log) is given up with [`Error::Stalled`] naming
//! the step, so the client can try the next remote instead of waiting for TCP to give up.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value as Json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::keepalive::Keepalive;
use crate::error::{Error, ProtocolError};
use crate::remote::Remote;
use crate::rpc::{self, FrameSplitter, Message};

const READ_CHUNK: usize = 256 * 1024;

pub(crate) struct Session {
    pub remote: Remote,
    reader: Box<dyn AsyncRead + Send + Unpin>,
    writer: mpsc::UnboundedSender<Vec<u8>>,
    /// Aborted when the session is dropped: a writer blocked on a peer that stopped reading must
    /// not outlive the session and hold its socket open.
    writer_task: AbortHandle,
    splitter: FrameSplitter,
    chunk: Vec<u8>,
    next_id: u64,
    /// When a byte last arrived; the inactivity probe measures from here.
    pub last_rx: Instant,
    /// How long a setup step may wait for its answer ([`Session::call`]).
    setup_timeout: Duration,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.writer_task.abort();
    }
}

impl Session {
    /// Connects within `timeout`, which also bounds each later [`Session::call`]. TCP sockets get
    /// `keepalive`.
    pub async fn connect(remote: &Remote, timeout: Duration, keepalive: &Keepalive) -> Result<Self, Error> {
        let io_err = |source| Error::Io {
            remote: remote.to_string(),
            source,
        };
        let stalled = |_| Error::Stalled {
            remote: remote.to_string(),
            step: "connect".into(),
            waited: timeout,
        };
        let (reader, (writer, writer_task)): (Box<dyn AsyncRead + Send + Unpin>, _) = match remote {
            Remote::Unix(path) => {
                let s = tokio::time::timeout(timeout, UnixStream::connect(path))
                    .await
                    .map_err(stalled)?
                    .map_err(io_err)?;
                let (r, w) = s.into_split();
                (Box::new(r), spawn_writer(w, remote.clone()))
            }
            Remote::Tcp { host, port } => {
                let s = tokio::time::timeout(timeout, TcpStream::connect((host.as_str(), *port)))
                    .await
                    .map_err(stalled)?
                    .map_err(io_err)?;
                // Requests are single writes; do not let Nagle hold them back.
                s.set_nodelay(true).map_err(io_err)?;
                keepalive.apply(&s).map_err(|e| io_err(e.into()))?;
                let (r, w) = s.into_split();
                (Box::new(r), spawn_writer(w, remote.clone()))
            }
        };
        Ok(Self {
            remote: remote.clone(),
            reader,
            writer,
            writer_task,
            splitter: FrameSplitter::new(),
            chunk: vec![0; READ_CHUNK],
            next_id: 1,
            last_rx: Instant::now(),
            setup_timeout: timeout,
        })
    }

    fn write(&self, bytes: Vec<u8>) -> Result<(), Error> {
        self.writer.send(bytes).map_err(|_| self.closed())
    }

    fn closed(&self) -> Error {
        Error::Io {
            remote: self.remote.to_string(),
            source: std::io::Error::new(std::io::ErrorKind::BrokenPipe, "connection closed"),
        }
    }

    /// Sends a request and returns its id.
    pub fn send(&mut self, method: &str, params: &impl Serialize) -> Result<u64, Error> {
        let id = self.next_id;
        self.next_id += 1;
        self.write(rpc::encode_request(id, method, params))?;
        Ok(id)
    }

    /// Answers a request from the server.
    pub fn reply(&self, id: &rpc::Id, result: &Json) -> Result<(), Error> {
        self.write(rpc::encode_reply(id, result))
    }

    /// The next message from the server. Cancel-safe.
    pub async fn next_message(&mut self) -> Result<Message, Error> {
        loop {
            let remote = &self.remote;
            let protocol = |source| Error::Protocol {
                remote: remote.to_string(),
                source,
            };
            if let Some(frame) = self.splitter.next_frame().map_err(protocol)? {
                return Message::decode(frame).map_err(protocol);
            }
            let n = self
                .reader
                .read(&mut self.chunk)
                .await
                .map_err(|source| Error::Io {
                    remote: self.remote.to_string(),
                    source,
                })?;
            if n == 0 {
                return Err(if self.splitter.pending() > 0 {
                    Error::Protocol {
                        remote: self.remote.to_string(),
                        source: ProtocolError::Framing("connection closed in the middle of a message".into()),
                    }
                } else {
                    self.closed()
                });
            }
            self.last_rx = Instant::now();
            self.splitter.extend(&self.chunk[..n]);
        }
    }

    /// Sends a request and waits for its reply, answering `echo` and keeping any notification
    /// that arrives meanwhile in `deferred`. Used while setting a session up, before the actor's
    /// main loop runs.
    ///
    /// The reply must begin within the setup timeout, and, once it streams in, no pause may last
    /// that long: a large monitor reply that keeps arriving is progress, a server that sends
    /// nothing (or only its own `echo` requests) is not. `params[0]` names the database in every
    /// setup request; the step in [`Error::Stalled`] is `method(database)`.
    pub async fn call(
        &mut self,
        method: &str,
        params: &Json,
        deferred: &mut Vec<Message>,
    ) -> Result<Result<Box<serde_json::value::RawValue>, rpc::RpcError>, Error> {
        let id = self.send(method, params)?;
        let sent = Instant::now();
        loop {
            let deadline = setup_deadline(
                sent,
                self.last_rx,
                self.splitter.pending() > 0,
                self.setup_timeout,
            );
            let Ok(message) = tokio::time::timeout_at(deadline, self.next_message()).await else {
                // Bytes may have arrived while waiting: look again with them counted.
                if setup_deadline(
                    sent,
                    self.last_rx,
                    self.splitter.pending() > 0,
                    self.setup_timeout,
                ) > Instant::now()
                {
                    continue;
                }
                return Err(Error::Stalled {
                    remote: self.remote.to_string(),
                    step: format!("{method}({})", params[0].as_str().unwrap_or_default()),
                    waited: self.setup_timeout,
                });
            };
            match message? {
                Message::Response { id: rid, result } if rid.as_u64() == Some(id) => return Ok(result),
                Message::Response { .. } => {}
                Message::Request {
                    id: rid,
                    method,
                    params,
                } => {
                    if method == "echo" {
                        self.reply(&rid, &params)?;
                    }
                }
                notification @ Message::Notification { .. } => deferred.push(notification),
            }
        }
    }
}

/// When a setup step that sent its request at `sent` gives up: `timeout` after the request, or,
/// while a message is partly received (`streaming`), `timeout` after its last byte. Pure.
fn setup_deadline(sent: Instant, last_rx: Instant, streaming: bool, timeout: Duration) -> Instant {
    if streaming {
        sent.max(last_rx) + timeout
    } else {
        sent + timeout
    }
}

/// Writes queued frames in order; ends when the session is dropped or the socket fails (the
/// reader then sees the connection close).
fn spawn_writer<W>(mut w: W, remote: Remote) -> (mpsc::UnboundedSender<Vec<u8>>, AbortHandle)
where
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let task = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if let Err(e) = w.write_all(&frame).await {
                tracing::debug!(%remote, error = %e, "ovsdb write failed");
                return;
            }
        }
        let _ = w.shutdown().await;
    });
    (tx, task.abort_handle())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(3);

    #[test]
    fn a_setup_step_waits_the_timeout_from_its_request() {
        let sent = Instant::now();
        // Nothing arrived, or whole messages that are not the reply (the server's own `echo`):
        // they do not extend the wait.
        assert_eq!(setup_deadline(sent, sent, false, T), sent + T);
        assert_eq!(
            setup_deadline(sent, sent + Duration::from_secs(2), false, T),
            sent + T
        );
    }

    #[test]
    fn a_reply_still_arriving_extends_the_wait_from_its_last_byte() {
        let sent = Instant::now();
        let last = sent + Duration::from_secs(5);
        assert_eq!(setup_deadline(sent, last, true, T), last + T);
        // A byte from before the request does not shorten it.
        let before = sent.checked_sub(Duration::from_secs(1)).unwrap_or(sent);
        assert_eq!(setup_deadline(sent, before, true, T), sent + T);
    }
}
