//! Conversions between the service layer's types and the WIT types: [`records`] (records and
//! the inputs of host calls), [`events`] (the typed event a component receives), and here the
//! host's errors and pages.

mod events;
mod records;

pub use events::event;
pub use records::*;

use crate::model::error::Error;
use crate::plugins::bindings::commerce::plugin::types as wt;
use crate::service::pagination::{PageInfo, PageParams};

/// A typed host error for the plugin; internal details stay in the host's log.
pub fn host_error(e: Error) -> wt::HostError {
    match e {
        Error::Validation { field, message } => {
            wt::HostError::Invalid(wt::FieldError { field, message })
        }
        Error::BadRequest { field, message, .. } => wt::HostError::Invalid(wt::FieldError {
            field: field.unwrap_or_default(),
            message,
        }),
        Error::MissingScope { scope } => wt::HostError::Forbidden(scope.to_owned()),
        Error::Forbidden { code, .. } => wt::HostError::Forbidden(code.to_owned()),
        Error::Unauthorized(_) => wt::HostError::Forbidden("installation".to_owned()),
        Error::NotFound { .. } | Error::NoRoute(_) => wt::HostError::NotFound,
        Error::Conflict {
            code,
            message,
            field,
        } => wt::HostError::Conflict(wt::RuleError {
            code: code.to_owned(),
            message,
            field,
        }),
        Error::RateLimited { retry_after } => {
            wt::HostError::RateLimited(u32::try_from(retry_after).unwrap_or(u32::MAX))
        }
        Error::QuotaExceeded { retry_after, .. } => {
            wt::HostError::QuotaExceeded(u32::try_from(retry_after).unwrap_or(u32::MAX))
        }
        Error::Internal(e) => {
            tracing::error!(error = %format!("{e:#}"), "host function failed");
            wt::HostError::Internal("internal error".to_owned())
        }
        other => wt::HostError::Internal(other.to_string()),
    }
}

/// A WIT page request as the REST query parameters.
pub fn page_params(page: &wt::PageRequest) -> PageParams {
    PageParams {
        limit: page.limit.map(|l| l.to_string()),
        cursor: page.cursor.clone(),
    }
}

/// Page info.
pub fn page_info(info: PageInfo) -> wt::PageInfo {
    wt::PageInfo {
        next_cursor: info.next_cursor,
        has_more: info.has_more,
    }
}
