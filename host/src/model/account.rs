//! People who sign in: a store's staff (owner or staff) and plugin developers; the invitations
//! that make them, and their sessions.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::ids::{AccountId, ApiKeyId, StoreId};

/// What an account may see and do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A store's owner: its pages, and inviting its staff.
    Owner,
    /// A store's staff: its pages.
    Staff,
    /// A plugin developer: the developer console of the plugins they publish.
    Developer,
}

impl Role {
    /// Whether the role belongs to a store (owner, staff).
    pub fn is_merchant(self) -> bool {
        matches!(self, Self::Owner | Self::Staff)
    }

    /// The role's name, as in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Owner => "owner",
            Self::Staff => "staff",
            Self::Developer => "developer",
        }
    }
}

/// Someone who signs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Account {
    /// `acct_…`.
    pub id: AccountId,
    /// The sign-in address, lower-cased; unique on the host.
    pub email: String,
    /// Owner, staff or developer.
    pub role: Role,
    /// The store of an owner or staff member; none for a developer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_id: Option<StoreId>,
    /// The argon2id hash of the password (PHC string); never shown.
    #[serde(skip_serializing_if = "String::is_empty", default)]
    #[schema(ignore)]
    pub password_hash: String,
    /// When the invitation was accepted.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
}

impl Account {
    /// Key of an account record.
    pub fn key(id: &AccountId) -> String {
        format!("account/{id}")
    }

    /// Key of the index from a (lower-cased) email address to its account.
    pub fn email_key(email: &str) -> String {
        format!("account-email/{email}")
    }

    /// Key of the index of a store's accounts (owner and staff).
    pub fn store_key(store: &StoreId, id: &AccountId) -> String {
        format!("store-account/{store}/{id}")
    }

    /// The account without its password hash, as the API shows it.
    pub fn public(mut self) -> Self {
        self.password_hash.clear();
        self
    }
}

/// Who sent an invitation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case", tag = "kind", content = "id")]
pub enum Inviter {
    /// The operator (admin token).
    Operator,
    /// A store's owner (inviting staff).
    Account(AccountId),
}

/// A pending invitation: a one-time link, mailed to `email`, to choose a password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Invitation {
    /// Where the link was sent, lower-cased.
    pub email: String,
    /// The role the account will have.
    pub role: Role,
    /// The store, for an owner or staff member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_id: Option<StoreId>,
    /// Who invited.
    pub invited_by: Inviter,
    /// When it was sent.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// After this the link no longer works.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub expires_at: Timestamp,
}

impl Invitation {
    /// Key of an invitation, by the SHA-256 of its link's token (the token itself is only in the
    /// mail).
    pub fn key(token_hash: &str) -> String {
        format!("invitation/{token_hash}")
    }
}

/// A signed-in browser: its cookie holds a random id whose SHA-256 is the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Who signed in.
    pub account_id: AccountId,
    /// The token every form of this session carries (CSRF protection).
    pub csrf: String,
    /// When it was made.
    #[serde(with = "crate::model::clock::api_ts")]
    pub created_at: Timestamp,
    /// After this the cookie no longer signs in.
    #[serde(with = "crate::model::clock::api_ts")]
    pub expires_at: Timestamp,
}

impl Session {
    /// Key of a session, by the SHA-256 of its cookie's id.
    pub fn key(id_hash: &str) -> String {
        format!("session/{id_hash}")
    }
}

/// A developer's API key, as listed (the secret is shown once, when it is made).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApiKey {
    /// `key_…`.
    pub id: ApiKeyId,
    /// Whose it is.
    pub account_id: AccountId,
    /// What the developer called it (`laptop`, `ci`).
    pub name: String,
    /// The secret's last four characters, to tell keys apart.
    pub hint: String,
    /// When it was made.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
}

impl ApiKey {
    /// Key of an API key by the SHA-256 of its secret.
    pub fn key(secret_hash: &str) -> String {
        format!("apikey/{secret_hash}")
    }

    /// Key of the index of a developer's keys (its value is the secret's hash).
    pub fn account_key(account: &AccountId, id: &ApiKeyId) -> String {
        format!("account-key/{account}/{id}")
    }
}
