//! Cursor pagination, shared by every list endpoint.
//!
//! A page is `{"data": [...], "page": {"next_cursor", "has_more"}}`. A cursor is opaque to clients:
//! it names the last key seen and the list it belongs to (store, resource, filters), and carries an
//! HMAC under a host secret. A cursor that was changed, or that belongs to another list or another
//! store, is refused with `validation_failed` on `cursor`, so it can never be forged into someone
//! else's data.

use std::ops::ControlFlow;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use utoipa::{IntoParams, ToSchema};

use crate::model::error::{Error, Result};
use crate::storage::Db;

/// Items per page when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;
/// The largest `limit` accepted.
pub const MAX_LIMIT: usize = 250;

/// The query parameters every list endpoint accepts.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Items per page, 1 to 250; 50 when absent.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 250)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// The page envelope.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Page<T> {
    /// Items of the page.
    pub data: Vec<T>,
    /// Where the next page starts.
    pub page: PageInfo,
}

/// Pagination state of a page.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PageInfo {
    /// Opaque cursor for the next page; null on the last page. Clients must not parse it.
    pub next_cursor: Option<String>,
    /// True when more items follow.
    pub has_more: bool,
}

impl<T> Page<T> {
    /// Converts the items, keeping the page info.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            data: self.data.into_iter().map(f).collect(),
            page: self.page,
        }
    }
}

/// Signs and checks cursors.
#[derive(Clone)]
pub struct Cursors {
    key: [u8; 32],
}

impl std::fmt::Debug for Cursors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cursors")
    }
}

#[derive(Serialize, Deserialize)]
struct CursorBody {
    /// The list this cursor belongs to.
    l: String,
    /// The last key of the previous page.
    k: String,
}

type HmacSha256 = Hmac<Sha256>;

impl Cursors {
    /// Uses `key` (a host secret kept in storage) to sign cursors.
    pub fn new(key: [u8; 32]) -> Self {
        Self { key }
    }

    fn mac(&self, payload: &[u8]) -> Result<Vec<u8>> {
        let mut mac = HmacSha256::new_from_slice(&self.key)
            .map_err(|e| Error::Internal(anyhow::anyhow!("cursor key: {e}")))?;
        mac.update(payload);
        Ok(mac.finalize().into_bytes()[..16].to_vec())
    }

    fn encode(&self, list: &str, key: &str) -> Result<String> {
        let payload = serde_json::to_vec(&CursorBody {
            l: list.to_owned(),
            k: key.to_owned(),
        })?;
        let sig = self.mac(&payload)?;
        Ok(format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(sig)
        ))
    }

    fn decode(&self, list: &str, cursor: &str) -> Result<String> {
        let bad = || {
            Error::invalid(
                "cursor",
                "not a cursor of this list; pass `page.next_cursor` from the previous page unchanged",
            )
        };
        let (payload, sig) = cursor.split_once('.').ok_or_else(bad)?;
        let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| bad())?;
        let sig = URL_SAFE_NO_PAD.decode(sig).map_err(|_| bad())?;
        let mut mac = HmacSha256::new_from_slice(&self.key)
            .map_err(|e| Error::Internal(anyhow::anyhow!("cursor key: {e}")))?;
        mac.update(&payload);
        if sig.len() != 16 || mac.verify_truncated_left(&sig).is_err() {
            return Err(bad());
        }
        let body: CursorBody = serde_json::from_slice(&payload).map_err(|_| bad())?;
        if body.l != list {
            return Err(bad());
        }
        Ok(body.k)
    }
}

/// A parsed, checked page request.
#[derive(Debug, Clone)]
pub struct PageRequest {
    /// Items per page.
    pub limit: usize,
    cursor: Option<String>,
}

impl PageRequest {
    /// Checks `limit` (1..=250, default 50).
    pub fn parse(params: &PageParams) -> Result<Self> {
        let limit = match params.limit.as_deref() {
            None => DEFAULT_LIMIT,
            Some(raw) => match raw.parse::<usize>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => {
                    return Err(Error::invalid(
                        "limit",
                        format!("must be a whole number from 1 to {MAX_LIMIT}; got `{raw}`"),
                    ));
                }
            },
        };
        Ok(Self {
            limit,
            cursor: params.cursor.clone(),
        })
    }

    /// The first page with `limit` items.
    pub fn first(limit: usize) -> Self {
        Self {
            limit,
            cursor: None,
        }
    }

    /// The page after `cursor`.
    pub fn after(limit: usize, cursor: impl Into<String>) -> Self {
        Self {
            limit,
            cursor: Some(cursor.into()),
        }
    }
}

/// A list to page through: the records under `prefix`, newest first when `newest_first`,
/// restricted by `keep`. `list_id` names the list and its filters (and must include the store):
/// a cursor is valid only for the same `list_id`.
#[derive(Debug)]
pub struct Listing<'a> {
    /// Key prefix of the records.
    pub prefix: &'a str,
    /// Identity of the list, store and filters included.
    pub list_id: &'a str,
    /// Whether to list in descending key (creation) order.
    pub newest_first: bool,
}

impl Listing<'_> {
    /// Reads one page, scanning past records `keep` rejects.
    pub fn page<T: DeserializeOwned>(
        &self,
        db: &Db,
        cursors: &Cursors,
        req: &PageRequest,
        mut keep: impl FnMut(&T) -> bool,
    ) -> Result<Page<T>> {
        let after = match &req.cursor {
            Some(c) => {
                let key = cursors.decode(self.list_id, c)?;
                if !key.starts_with(self.prefix) {
                    return Err(Error::invalid("cursor", "not a cursor of this list"));
                }
                Some(key)
            }
            None => None,
        };
        let mut data = Vec::with_capacity(req.limit);
        let mut last_key = None;
        let mut more = false;
        db.scan(self.prefix)
            .after(after)
            .reverse(self.newest_first)
            .batch((req.limit + 1).max(64))
            .until(|key, item: T| {
                if !keep(&item) {
                    return Ok(ControlFlow::Continue(()));
                }
                if data.len() == req.limit {
                    // One more matching item exists: there is a next page.
                    more = true;
                    return Ok(ControlFlow::Break(()));
                }
                data.push(item);
                last_key = Some(key);
                Ok(ControlFlow::Continue(()))
            })?;
        let next_cursor = match (more, &last_key) {
            (true, Some(k)) => Some(cursors.encode(self.list_id, k)?),
            _ => None,
        };
        Ok(Page {
            data,
            page: PageInfo {
                has_more: next_cursor.is_some(),
                next_cursor,
            },
        })
    }
}
