//! A minimal HTTP/1.1 client over [`TcpStream`]: one request per connection
//! (`Connection: close`), the answer read to EOF, its body cut to `Content-Length` or
//! de-chunked.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

/// The read and write timeout of [`request`].
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The read and write timeout of [`get_json`] (polled while a server warms up).
const GET_JSON_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One `read` of `stream`, retried when it fails with EINTR. A socket read with a timeout
/// fails so when the process is stopped and continued while it waits (job control, a
/// debugger attaching, a cgroup freezer), or a signal it handles arrives, even under
/// SA_RESTART, and std does not retry it; nothing happened to the socket (issue 56 item 14:
/// a socket taken for closed by the server). `read_to_end` and `read_exact` retry it
/// themselves: a test's own single reads go through this.
pub(crate) fn read_uninterrupted(stream: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            read => return read,
        }
    }
}

/// Sends `method path` with `headers` and `body` (a `Content-Length` is always sent); returns
/// the status and the body. Panics on any I/O or framing error.
pub(crate) fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let (status, _, body) = exchange(addr, method, path, headers, body, REQUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Sends `method path` with `headers` and `body`: the status, the `Content-Type` (if sent)
/// and the body's bytes. Panics on any I/O or framing error.
pub(crate) fn request_bytes(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Option<String>, Vec<u8>) {
    let (status, head, body) = exchange(addr, method, path, headers, body, REQUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let kind = header_of(&head, "Content-Type").map(str::to_owned);
    (status, kind, body)
}

/// `GET path_and_query`: the status, the `Content-Type` (if sent) and the body's bytes.
/// Panics on any I/O or framing error.
pub(crate) fn get_bytes(addr: SocketAddr, path_and_query: &str) -> (u16, Option<String>, Vec<u8>) {
    let (status, head, body) = exchange(addr, "GET", path_and_query, &[], b"", REQUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("GET {path_and_query}: {e}"));
    let kind = header_of(&head, "Content-Type").map(str::to_owned);
    (status, kind, body)
}

/// `GET path_and_query`: the status, the response header `name` (if sent) and the body.
/// Panics on any I/O or framing error.
pub(crate) fn get_with_header(
    addr: SocketAddr,
    path_and_query: &str,
    name: &str,
) -> (u16, Option<String>, String) {
    let (status, head, body) = exchange(addr, "GET", path_and_query, &[], b"", REQUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("GET {path_and_query}: {e}"));
    let value = header_of(&head, name).map(str::to_owned);
    (status, value, String::from_utf8_lossy(&body).into_owned())
}

/// The value of header `name` in a response's `head` (status line first).
fn header_of<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// `GET path_and_query` as JSON. Any status but 200 is an error carrying the body, as is a
/// body that is not JSON or a failed connection.
pub(crate) fn get_json(addr: SocketAddr, path_and_query: &str) -> Result<Value, String> {
    let (status, _, body) = exchange(
        addr,
        "GET",
        path_and_query,
        &[("Accept", "application/json")],
        b"",
        GET_JSON_TIMEOUT,
    )?;
    let text = String::from_utf8_lossy(&body);
    if status != 200 {
        return Err(format!("status {status}: {text}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{e} in {text}"))
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
pub(crate) fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> Result<(u16, String, Vec<u8>), String> {
    let err = |e: std::io::Error| e.to_string();
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(err)?;
    stream.set_read_timeout(Some(timeout)).map_err(err)?;
    stream.set_write_timeout(Some(timeout)).map_err(err)?;
    let head = request_head(addr, method, path, headers, body.len());
    stream.write_all(head.as_bytes()).map_err(err)?;
    stream.write_all(body).map_err(err)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(err)?;
    parse_answer(&raw)
}

/// The head of a one-request connection (`Connection: close`, a `Content-Length` always).
pub(crate) fn request_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body_len: usize,
) -> String {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {body_len}\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// The status, head (status line and headers) and body of an answer read to EOF: the body
/// cut to `Content-Length` or de-chunked.
pub(crate) fn parse_answer(raw: &[u8]) -> Result<(u16, String, Vec<u8>), String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {:?}", String::from_utf8_lossy(raw)))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let header = |name: &str| header_of(&head, name);
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body)?;
    } else if let Some(length) = header("content-length") {
        let length: usize = length
            .parse()
            .map_err(|e| format!("Content-Length {length:?}: {e}"))?;
        if body.len() < length {
            return Err(format!("body of {} bytes, not {length}", body.len()));
        }
        body.truncate(length);
    }
    Ok((status, head, body))
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk size")?;
        let size_field = std::str::from_utf8(&data[..eol]).map_err(|e| e.to_string())?;
        let size_hex = size_field.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|e| format!("chunk size {size_hex:?}: {e}"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}
