//! Why sending a message failed: a category and a fixed text for the plugin that sent it, the
//! details for the operator.
//!
//! A provider's or SMTP server's own words are the operator's: a reqwest error names the provider
//! URL (with its `?api_key=…`), an SMTP reply names the recipient's address, which the plugin is
//! never shown. The plugin reads `last_error_category` and a fixed `last_error` text (with the
//! HTTP or SMTP status code, which tells nothing secret); the operator also reads
//! `last_error_detail`, stored with the secrets of any URL in it (user info, query) removed.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Why the last attempt to send a message failed, as the plugin that sent it reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureCategory {
    /// The merchant's provider or SMTP server could not be reached (retried).
    ProviderUnreachable,
    /// It did not answer in time (retried).
    Timeout,
    /// It answered with a temporary failure: HTTP 408, 429 or 5xx, SMTP 4xx (retried).
    ProviderUnavailable,
    /// It refused the message for good: another HTTP 4xx, an SMTP 5xx.
    ProviderRejected,
    /// The recipient's address cannot be used, or the server refused it.
    InvalidRecipient,
    /// The merchant's sender settings do not work (sender address, TLS, credentials).
    SenderMisconfigured,
}

impl FailureCategory {
    /// The fixed text the plugin reads, with the status code when there is one.
    pub fn text(self, code: Option<&str>) -> String {
        let text = match self {
            Self::ProviderUnreachable => "the merchant's provider could not be reached",
            Self::Timeout => "the merchant's provider did not answer in time",
            Self::ProviderUnavailable => "the merchant's provider is unavailable for now",
            Self::ProviderRejected => "the merchant's provider refused the message",
            Self::InvalidRecipient => "the recipient's address was refused",
            Self::SenderMisconfigured => "the merchant's sender for this channel is misconfigured",
        };
        match code {
            Some(code) => format!("{text} ({code})"),
            None => text.to_owned(),
        }
    }
}

/// The text a plugin reads for a failure recorded before failures had categories.
pub const UNCATEGORIZED: &str = "the last attempt failed";

/// A failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What the plugin may know.
    pub category: FailureCategory,
    /// `HTTP 503`, `SMTP 550`: shown to the plugin.
    pub code: Option<String>,
    /// The provider's own words, for the operator (secrets of URLs removed).
    pub detail: String,
}

impl Failure {
    /// A failure with its details; URL secrets are removed from `detail` here.
    pub fn new(category: FailureCategory, code: Option<String>, detail: &str) -> Self {
        Self {
            category,
            code,
            detail: scrub(detail),
        }
    }

    /// What the plugin reads as `last_error`.
    pub fn text(&self) -> String {
        self.category.text(self.code.as_deref())
    }
}

/// What one attempt to send a message or a mail came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// The provider or SMTP server accepted it.
    Sent,
    /// A failure worth retrying: connection error, timeout, HTTP 408/429/5xx, SMTP 4xx.
    Transient(Failure),
    /// A refusal for good: another HTTP 4xx, an SMTP 5xx, an unusable address or sender.
    Permanent(Failure),
}

/// `text` with the user info, query and fragment of every URL in it removed
/// (`https://user:pw@sms.example/send?api_key=k` → `https://sms.example/send?…`).
pub fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // The scheme: the letters (and `+-.`) right before `://`.
        let scheme_start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .map_or(rest.len(), |i| at + i);
        // A URL inside parentheses keeps its closing one outside.
        let end = if rest[..scheme_start].ends_with('(') && rest[..end].ends_with(')') {
            end - 1
        } else {
            end
        };
        out.push_str(&rest[..scheme_start]);
        out.push_str(&scrub_url(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn scrub_url(url: &str) -> String {
    let Some((scheme, after)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = after
        .find(['/', '?', '#'])
        .map_or((after, ""), |i| after.split_at(i));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (path, secret) = path
        .find(['?', '#'])
        .map_or((path, false), |i| (&path[..i], true));
    let userinfo = if authority.contains('@') { "…@" } else { "" };
    let tail = if secret { "?…" } else { "" };
    format!("{scheme}://{userinfo}{host}{path}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_secrets_and_keep_where_they_point() {
        assert_eq!(
            scrub("error sending request for url (https://sms.example/v1/send?api_key=k-123&to=1)"),
            "error sending request for url (https://sms.example/v1/send?…)"
        );
        assert_eq!(
            scrub("smtps://user:pw@mail.example:465 refused; see http://x.example#frag"),
            "smtps://…@mail.example:465 refused; see http://x.example?…"
        );
        assert_eq!(scrub("no url here: 550 5.1.1"), "no url here: 550 5.1.1");
    }

    #[test]
    fn the_plugin_reads_a_fixed_text_with_the_status_code() {
        let failure = Failure::new(
            FailureCategory::ProviderUnavailable,
            Some("HTTP 503".into()),
            "the provider at https://p.example/?api_key=s answered 503",
        );
        assert_eq!(
            failure.text(),
            "the merchant's provider is unavailable for now (HTTP 503)"
        );
        assert!(!failure.detail.contains("api_key"));
    }
}
