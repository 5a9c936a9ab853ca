//! The HTTP/1.1 server loop.
//!
//! The host serves connections itself rather than with `axum::serve`, for what that one does not
//! let it set:
//! - hyper's own header limits are raised well above the host's ([`MAX_HEADER_BYTES`],
//!   [`MAX_HEADER_FIELDS`]), so that oversized headers reach [`check_header_limits`], which refuses
//!   them with the error object; only requests beyond hyper's limits (1 MiB of head, 1000
//!   fields) still get hyper's bare 431 and a closed connection;
//! - every request carries its client's address ([`ConnectInfo`]), for the limiter of failed
//!   authentication;
//! - a client has 30 seconds to send its request head.
//!
//! Shutdown is graceful like `axum::serve`'s: no new connections, in-flight requests finish.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use futures::FutureExt as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt as _;

use crate::model::error::Error;

/// The largest total size of a request's header fields (names and values), in bytes.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;
/// The most header fields a request may have.
pub const MAX_HEADER_FIELDS: usize = 100;
/// hyper's read buffer, which bounds the request head it parses.
const HYPER_MAX_BUF_BYTES: usize = 1024 * 1024;
/// hyper's limit on header fields.
const HYPER_MAX_HEADERS: usize = 1000;
/// How long a client has to send its request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Refuses requests whose header fields are too many or too large: 431 `headers_too_large`
/// (checked first thing by [`super::middleware::request_context`]).
pub fn check_header_limits(headers: &axum::http::HeaderMap) -> Result<(), Error> {
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if headers.len() > MAX_HEADER_FIELDS || bytes > MAX_HEADER_BYTES {
        return Err(Error::HeadersTooLarge {
            max_bytes: MAX_HEADER_BYTES,
            max_fields: MAX_HEADER_FIELDS,
        });
    }
    Ok(())
}

/// Refuses a request whose `Content-Length` announces a body over the limit
/// ([`super::MAX_BODY_BYTES`]) from its head alone: the body is not read (a client that sent
/// `Expect: 100-continue` never sends it), where the body limit would read the first 16 MiB
/// first.
pub fn check_announced_body(headers: &axum::http::HeaderMap) -> Result<(), Error> {
    let announced = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match announced {
        Some(length) if length > super::MAX_BODY_BYTES as u64 => Err(Error::PayloadTooLarge {
            limit: super::MAX_BODY_BYTES,
        }),
        _ => Ok(()),
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then lets open requests finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Dropping the receiver tells the accept loop and every connection to stop.
    let (signal_tx, signal_rx) = watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        drop(signal_rx);
    });
    // Each connection holds a receiver; when all are gone, every connection has closed.
    let (close_tx, close_rx) = watch::channel(());
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = signal_tx.closed() => break,
        };
        let service = app
            .clone()
            .map_request(move |req: hyper::Request<Incoming>| {
                let mut req = req.map(Body::new);
                req.extensions_mut().insert(ConnectInfo(remote));
                req
            });
        let service = TowerToHyperService::new(service);
        let signal_tx = signal_tx.clone();
        let close_rx = close_rx.clone();
        tokio::spawn(async move {
            // Declared first, so dropped last: the connection (and the app state it holds, with
            // the storage) is gone before `serve` can see this receiver go and return. A host
            // stopped has then let go of its storage (sled's folder lock with it).
            let _close = close_rx;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(HYPER_MAX_BUF_BYTES)
                .max_headers(HYPER_MAX_HEADERS);
            let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
            let mut stopping = pin!(signal_tx.closed().fuse());
            loop {
                tokio::select! {
                    served = conn.as_mut() => {
                        if let Err(e) = served {
                            tracing::debug!(error = %e, %remote, "connection ended with an error");
                        }
                        break;
                    }
                    () = &mut stopping => conn.as_mut().graceful_shutdown(),
                }
            }
        });
    }
    drop(close_rx);
    drop(listener);
    close_tx.closed().await;
    Ok(())
}

/// The client address of a request served by [`serve`].
pub fn client_addr(req: &Request) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr)
}
