//! Just enough HTTP/1.1 to talk to the daemon over its unix socket: one POST per connection
//! (`Connection: close`), and a response parser for `Content-Length`, chunked, or
//! read-to-close bodies. Hand-written so the shim needs no async runtime or HTTP stack: it
//! runs once per pod and must start fast. Pure: bytes in, bytes out.

/// A parsed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Reason phrase (may be empty).
    pub reason: String,
    /// Body, de-chunked.
    pub body: Vec<u8>,
}

/// A response we could not make sense of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed HTTP response from the daemon: {0}")]
pub struct HttpError(pub String);

/// The bytes of `POST path` with a JSON body. The host is a placeholder, as in Kube-OVN's
/// shim: the daemon serves one socket and ignores it.
pub fn encode_post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "POST {path} HTTP/1.1\r\nHost: dummy\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Parses everything read from the connection until the peer closed it.
pub fn parse_response(mut raw: &[u8]) -> Result<HttpResponse, HttpError> {
    loop {
        let (status, reason, headers, rest) = parse_head(raw)?;
        // Interim 1xx answers (100 Continue) precede the real one; skip them.
        if (100..200).contains(&status) {
            raw = rest;
            continue;
        }
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        let body = if header("Transfer-Encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
        {
            dechunk(rest)?
        } else if let Some(len) = header("Content-Length") {
            let len: usize = len
                .trim()
                .parse()
                .map_err(|_| HttpError(format!("bad Content-Length {len:?}")))?;
            rest.get(..len)
                .ok_or_else(|| HttpError(format!("body shorter than Content-Length {len}")))?
                .to_vec()
        } else {
            rest.to_vec()
        };
        return Ok(HttpResponse { status, reason, body });
    }
}

type Head<'a> = (u16, String, Vec<(String, String)>, &'a [u8]);

fn parse_head(raw: &[u8]) -> Result<Head<'_>, HttpError> {
    let end = find(raw, b"\r\n\r\n").ok_or_else(|| {
        if raw.is_empty() {
            HttpError("the daemon closed the connection without answering".into())
        } else {
            HttpError("no end of headers".into())
        }
    })?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| HttpError("headers are not UTF-8".into()))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let proto = parts.next().unwrap_or_default();
    if !proto.starts_with("HTTP/1.") {
        return Err(HttpError(format!("status line {status_line:?}")));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| HttpError(format!("status line {status_line:?}")))?;
    let reason = parts.next().unwrap_or_default().to_owned();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Ok((status, reason, headers, &raw[end + 4..]))
}

fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    loop {
        let eol = find(raw, b"\r\n").ok_or_else(|| HttpError("chunk size line not terminated".into()))?;
        let line = std::str::from_utf8(&raw[..eol]).map_err(|_| HttpError("chunk size not UTF-8".into()))?;
        // Chunk extensions (`;name=value`) are allowed and meaningless to us.
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| HttpError(format!("bad chunk size {size_text:?}")))?;
        raw = &raw[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = raw
            .get(..size)
            .ok_or_else(|| HttpError("chunk shorter than its size".into()))?;
        body.extend_from_slice(chunk);
        raw = raw.get(size + 2..).unwrap_or_default();
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_a_post() {
        let req = String::from_utf8(encode_post("/api/v1/add", b"{}")).unwrap();
        assert!(req.starts_with("POST /api/v1/add HTTP/1.1\r\n"));
        assert!(req.contains("Content-Length: 2\r\n"));
        assert!(req.ends_with("\r\n\r\n{}"));
    }

    #[test]
    fn parses_the_three_body_framings() {
        let cl = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk").unwrap();
        assert_eq!(
            (cl.status, cl.reason.as_str(), cl.body.as_slice()),
            (200, "OK", &b"{}"[..])
        );
        let chunked = parse_response(
            b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\n{\"e\r\n2\r\n\"}\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((chunked.status, chunked.body.as_slice()), (500, &b"{\"e\"}"[..]));
        let eof = parse_response(b"HTTP/1.0 204 No Content\r\n\r\n").unwrap();
        assert_eq!((eof.status, eof.body.len()), (204, 0));
        let cont = parse_response(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\nx").unwrap();
        assert_eq!((cont.status, cont.body.as_slice()), (200, &b"x"[..]));
    }

    #[test]
    fn rejects_garbage() {
        for raw in [
            &b""[..],
            b"SSH-2.0-OpenSSH\r\n\r\n",
            b"HTTP/1.1 abc OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ] {
            assert!(parse_response(raw).is_err(), "{}", String::from_utf8_lossy(raw));
        }
    }
}
