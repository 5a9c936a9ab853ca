//! The operator API over HTTP, as the plugin tool and the demo use it: a base URL and the admin
//! token, with errors that say what to do.

use std::path::Path;

use anyhow::{Context as _, anyhow};
use reqwest::Method;
use serde_json::Value;

/// Where the host listens when nothing says otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// A client of one host's operator API (`/admin/v1`).
#[derive(Debug, Clone)]
pub struct HostClient {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl HostClient {
    /// A client of the host at `base` (`http://127.0.0.1:8080`) with the operator's admin token.
    pub fn new(base: &str, token: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.trim().to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// The client the command line asks for: `--host` (else `COMMERCE_HOST_URL`, else
    /// [`DEFAULT_URL`]) and `--admin-token` (else `COMMERCE_HOST_ADMIN_TOKEN`, else the token a
    /// local host generated into `./data/admin-token`).
    pub fn from_args(host: Option<&str>, admin_token: Option<&str>) -> anyhow::Result<Self> {
        let base = host.unwrap_or(DEFAULT_URL);
        let token = match admin_token {
            Some(token) => token.to_owned(),
            None => {
                let path = Path::new("data").join("admin-token");
                std::fs::read_to_string(&path).map_err(|_| {
                    anyhow!(
                        "no admin token: pass --admin-token or set COMMERCE_HOST_ADMIN_TOKEN \
                         (a local host writes its token to ./data/admin-token, which is not here)"
                    )
                })?
            }
        };
        Ok(Self::new(base, &token))
    }

    /// The host's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request to the operator API (`path` starts with `/admin/v1`) and returns the JSON
    /// body of a 2xx. Anything else becomes an error naming the URL or the host's
    /// `code: message (field)`.
    pub async fn admin(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        self.send(method, path, &self.token, body).await
    }

    /// [`HostClient::admin`] for one record: `None` when the host answers 404.
    pub async fn admin_optional(
        &self,
        method: Method,
        path: &str,
    ) -> anyhow::Result<Option<Value>> {
        match self.exchange(method, path, &self.token, None).await? {
            (404, _, _) => Ok(None),
            answer => self.answer(answer).map(Some),
        }
    }

    /// The same as [`HostClient::admin`] with another bearer token (a project token on `/v1`).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let answer = self.exchange(method, path, token, body).await?;
        self.answer(answer)
    }

    /// A 2xx's body, or the error it describes.
    fn answer(&self, (status, json, context): (u16, Value, String)) -> anyhow::Result<Value> {
        if (200..300).contains(&status) {
            return Ok(json);
        }
        Err(anyhow!("{}", describe_error(status, &json)).context(context))
    }

    /// Sends a request; returns the status, the JSON body (`null` when empty or not JSON) and
    /// `METHOD URL answered STATUS` for an error's context.
    async fn exchange(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value, String)> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method.clone(), &url).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| {
            if e.is_connect() || e.is_timeout() {
                anyhow!(
                    "cannot reach the host at {}: is it running? Start one with `commerce-host serve` \
                     (or `commerce-host demo`), or point --host / COMMERCE_HOST_URL at it",
                    self.base
                )
            } else {
                anyhow!("{method} {url}: {e}")
            }
        })?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .with_context(|| format!("reading the answer of {method} {url}"))?;
        let json: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        Ok((
            status.as_u16(),
            json,
            format!("{method} {url} answered {status}"),
        ))
    }
}

/// `code: message (field)` of the host's error body, with a hint for the errors a plugin author
/// meets first.
pub fn describe_error(status: u16, body: &Value) -> String {
    let error = &body["error"];
    let code = error["code"].as_str().unwrap_or("error");
    let message = error["message"].as_str().unwrap_or("(no message)");
    let mut text = match error["field"].as_str() {
        Some(field) => format!("{code}: {message} ({field})"),
        None => format!("{code}: {message}"),
    };
    if status == 401 {
        text.push_str(
            "\nhint: the admin token is wrong; pass the host's with --admin-token or COMMERCE_HOST_ADMIN_TOKEN",
        );
    } else if status == 409 && code.contains("version") {
        text.push_str("\nhint: raise `version` in plugin.toml to publish again");
    }
    text
}
