//! Small checks shared by the resources, each naming the offending field.

use std::collections::BTreeMap;

use crate::model::error::{Error, Result};

/// Checks that a text has between `min` and `max` characters (after trimming).
pub fn text(field: &str, value: &str, min: usize, max: usize) -> Result<()> {
    let len = value.trim().chars().count();
    if len < min {
        return Err(Error::invalid(
            field,
            if min == 1 {
                "must not be empty".to_owned()
            } else {
                format!("must be at least {min} characters")
            },
        ));
    }
    if value.chars().count() > max {
        return Err(Error::invalid(
            field,
            format!("must be at most {max} characters"),
        ));
    }
    Ok(())
}

/// Checks an optional text.
pub fn opt_text(field: &str, value: Option<&str>, max: usize) -> Result<()> {
    match value {
        Some(v) => text(field, v, 0, max),
        None => Ok(()),
    }
}

/// Checks an ISO 4217 currency code (upper case, e.g. `EUR`).
pub fn currency(field: &str, code: &str) -> Result<()> {
    if iso_currency::Currency::from_code(code).is_some() {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("`{code}` is not an ISO 4217 currency code such as `EUR`"),
        ))
    }
}

/// Checks a price or amount in minor units: from 1 to [`crate::model::money::MAX_AMOUNT`].
pub fn positive_amount(field: &str, amount: i64) -> Result<()> {
    crate::model::money::Money::positive(field, amount).map(|_| ())
}

/// Checks a list of tags: at most 50, each 1 to 64 characters, no commas.
pub fn tags(field: &str, tags: &[String]) -> Result<()> {
    if tags.len() > 50 {
        return Err(Error::invalid(field, "at most 50 tags"));
    }
    for (i, tag) in tags.iter().enumerate() {
        text(&format!("{field}[{i}]"), tag, 1, 64)?;
        if tag.contains(',') {
            return Err(Error::invalid(
                format!("{field}[{i}]"),
                "must not contain a comma",
            ));
        }
    }
    Ok(())
}

/// Checks custom fields: at most 50 keys of 1 to 40 characters, values up to 500 characters.
pub fn custom_fields(field: &str, fields: &BTreeMap<String, String>) -> Result<()> {
    if fields.len() > 50 {
        return Err(Error::invalid(field, "at most 50 custom fields"));
    }
    for (key, value) in fields {
        let ok = (1..=40).contains(&key.len())
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !ok {
            return Err(Error::invalid(
                format!("{field}.{key}"),
                "keys are 1 to 40 of letters, digits, `_`, `-` or `.`",
            ));
        }
        text(&format!("{field}.{key}"), value, 0, 500)?;
    }
    Ok(())
}

/// Checks a phone number in E.164 form (`+` then 8 to 15 digits).
pub fn phone(field: &str, phone: &str) -> Result<()> {
    let digits = phone.strip_prefix('+').unwrap_or("");
    if (8..=15).contains(&digits.len())
        && digits.chars().all(|c| c.is_ascii_digit())
        && !digits.starts_with('0')
    {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("`{phone}` is not a phone number in E.164 form such as `+14155550123`"),
        ))
    }
}

/// Checks a site-relative path (`/products/123`).
pub fn path(field: &str, path: &str) -> Result<()> {
    if path.starts_with('/')
        && !path.starts_with("//")
        && path.len() <= 2048
        && !path.chars().any(char::is_whitespace)
    {
        Ok(())
    } else {
        Err(Error::invalid(field, "must be a path starting with `/`"))
    }
}

/// Checks an http(s) URL.
pub fn http_url(field: &str, url: &str) -> Result<()> {
    let ok = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= 2048
        && !url.chars().any(char::is_whitespace)
        && url
            .split("://")
            .nth(1)
            .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(field, "must be an http or https URL"))
    }
}

pub use crate::service::plugins::validate_email as email;
