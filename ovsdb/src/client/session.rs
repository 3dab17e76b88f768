//! One connection to one server: the socket, a writer task, framing, request ids.
//!
//! Reading is done by whoever owns the session (the client's actor) through
//! [`Session::next_message`], which is cancel-safe: it can sit in a `select!` and lose nothing.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value as Json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::error::{Error, ProtocolError};
use crate::remote::Remote;
use crate::rpc::{self, FrameSplitter, Message};

const READ_CHUNK: usize = 256 * 1024;

pub(crate) struct Session {
    pub remote: Remote,
    reader: Box<dyn AsyncRead + Send + Unpin>,
    writer: mpsc::UnboundedSender<Vec<u8>>,
    splitter: FrameSplitter,
    chunk: Vec<u8>,
    next_id: u64,
    /// When a byte last arrived; the inactivity probe measures from here.
    pub last_rx: Instant,
}

impl Session {
    pub async fn connect(remote: &Remote, timeout: Duration) -> Result<Self, Error> {
        let io_err = |source| Error::Io {
            remote: remote.to_string(),
            source,
        };
        let timed_out = || {
            io_err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timed out",
            ))
        };
        let (reader, writer): (Box<dyn AsyncRead + Send + Unpin>, _) = match remote {
            Remote::Unix(path) => {
                let s = tokio::time::timeout(timeout, UnixStream::connect(path))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(io_err)?;
                let (r, w) = s.into_split();
                (Box::new(r), spawn_writer(w, remote.clone()))
            }
            Remote::Tcp { host, port } => {
                let s = tokio::time::timeout(timeout, TcpStream::connect((host.as_str(), *port)))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(io_err)?;
                // Requests are single writes; do not let Nagle hold them back.
                s.set_nodelay(true).map_err(io_err)?;
                let (r, w) = s.into_split();
                (Box::new(r), spawn_writer(w, remote.clone()))
            }
        };
        Ok(Self {
            remote: remote.clone(),
            reader,
            writer,
            splitter: FrameSplitter::new(),
            chunk: vec![0; READ_CHUNK],
            next_id: 1,
            last_rx: Instant::now(),
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
    pub async fn call(
        &mut self,
        method: &str,
        params: &impl Serialize,
        deferred: &mut Vec<Message>,
    ) -> Result<Result<Box<serde_json::value::RawValue>, rpc::RpcError>, Error> {
        let id = self.send(method, params)?;
        loop {
            match self.next_message().await? {
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

/// Writes queued frames in order; ends when the session is dropped or the socket fails (the
/// reader then sees the connection close).
fn spawn_writer<W>(mut w: W, remote: Remote) -> mpsc::UnboundedSender<Vec<u8>>
where
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if let Err(e) = w.write_all(&frame).await {
                tracing::debug!(%remote, error = %e, "ovsdb write failed");
                return;
            }
        }
        let _ = w.shutdown().await;
    });
    tx
}
