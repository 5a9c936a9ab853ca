//! Accounts of people: invitations (a one-time link by mail to choose a password), passwords
//! hashed with argon2id, sign-in limited per client address, and sessions.
//!
//! The operator invites a store's owner or a plugin developer; an owner invites the store's staff.
//! The invitation mail goes through the host's mail path (the operator's outbox when no SMTP
//! server is set). Accepting it with a password makes the account and ends the invitation. A
//! session is a random id in an HttpOnly cookie (stored only as its SHA-256) with its own CSRF
//! token for forms; it ends at sign-out or after [`SESSION_LIFETIME`].

use std::net::IpAddr;

use argon2::password_hash::SaltString;
use argon2::password_hash::rand_core::OsRng;
use argon2::{Argon2, PasswordHash, PasswordHasher as _, PasswordVerifier as _};
use jiff::{SignedDuration, Timestamp};
use rand::RngCore as _;
use serde::Deserialize;
use utoipa::ToSchema;

use super::Service;
use crate::model::account::{Account, ApiKey, Invitation, Inviter, Role, Session};
use crate::model::error::{Error, Result};
use crate::model::ids::{AccountId, ApiKeyId, StoreId};
use crate::model::mail::Mail;
use crate::service::maintenance::{Sweep, sweep};

/// When a session or an invitation ends (what the purge reads of either).
#[derive(Deserialize)]
struct Ends {
    #[serde(with = "crate::model::clock::api_ts")]
    expires_at: Timestamp,
}

/// A hash to verify against when the address has no account, so that an unknown address takes
/// as long as a wrong password.
fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(random_hex(16).as_bytes(), &salt)
            .map(|h| h.to_string())
            .unwrap_or_default()
    })
}

/// How long an invitation's link works.
pub const INVITATION_LIFETIME: SignedDuration = SignedDuration::from_hours(7 * 24);
/// How long a session signs in.
pub const SESSION_LIFETIME: SignedDuration = SignedDuration::from_hours(7 * 24);
/// How many API keys a developer may have.
pub const MAX_API_KEYS: usize = 20;
/// The prefix of a developer's API key.
pub const API_KEY_PREFIX: &str = "chk_";
/// Password length bounds, in characters.
pub const PASSWORD_CHARS: std::ops::RangeInclusive<usize> = 10..=128;

/// Body of the invitation operations: where to send the link.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InvitationBody {
    /// The address to invite (it becomes the account's sign-in, lower-cased).
    #[schema(max_length = 254)]
    pub email: String,
}

/// A signed-in session: the cookie's value (shown once) and the session.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// The cookie's value.
    pub cookie: String,
    /// The session.
    pub session: Session,
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

fn sha256_hex(value: &str) -> String {
    hex::encode(super::auth::hash_token(value))
}

/// Lower-cased and checked, or 400 on `field`.
fn normal_email(field: &str, email: &str) -> Result<String> {
    let email = email.trim().to_ascii_lowercase();
    super::plugins::validate_email(field, &email)?;
    Ok(email)
}

impl Service {
    /// Invites `email` as `role`: records the invitation (by its token's hash) and queues the
    /// mail with the one-time link in the same transaction. The operator invites owners (of
    /// `store_id`) and developers; an owner invites staff of their own store. An address that
    /// already has an account is 409 `account_exists`; inviting an address again replaces
    /// nothing, it sends a new link (each works until it is used or expires).
    pub fn invite(
        &self,
        by: &Inviter,
        email: &str,
        role: Role,
        store_id: Option<&StoreId>,
    ) -> Result<Invitation> {
        let email = normal_email("email", email)?;
        let store_id = match (by, role, store_id) {
            (Inviter::Operator, Role::Developer, None) => None,
            (Inviter::Operator, Role::Owner, Some(store)) => {
                self.store(store)?;
                Some(store.clone())
            }
            (Inviter::Account(id), Role::Staff, _) => {
                let owner = self.account(id)?;
                if owner.role != Role::Owner {
                    return Err(Error::Forbidden {
                        code: "not_allowed",
                        message: "only a store's owner invites its staff".into(),
                        field: None,
                    });
                }
                owner.store_id
            }
            _ => {
                return Err(Error::invalid(
                    "role",
                    "the operator invites a store's owner or a developer; an owner invites staff",
                ));
            }
        };
        let now = self.now();
        let token = random_hex(32);
        let invitation = Invitation {
            email: email.clone(),
            role,
            store_id: store_id.clone(),
            invited_by: by.clone(),
            created_at: now,
            expires_at: now
                .checked_add(INVITATION_LIFETIME)
                .map_err(|e| Error::Internal(e.into()))?,
        };
        let what = match (&store_id, role) {
            (Some(store), role) => {
                let domain = self.store(store)?.domain;
                format!("{} of the store {domain}", role.as_str())
            }
            (None, _) => "a plugin developer".to_owned(),
        };
        let link = format!("{}/invitations/{token}", self.public_url);
        let mail = Mail {
            to: email.clone(),
            subject: format!("[commerce-host] You are invited as {what}"),
            body: format!(
                "You are invited to commerce-host as {what}.\n\nChoose your password here (the \
                 link works once, until {}):\n\n{link}\n\nIf you did not expect this, ignore this \
                 mail.\n",
                invitation.expires_at
            ),
        };
        let route = self.mail_route;
        self.db.tx(|tx| {
            if tx.read::<AccountId>(&Account::email_key(&email))?.is_some() {
                return Err(Error::conflict(
                    "account_exists",
                    format!("{email} already has an account"),
                ));
            }
            tx.write(&Invitation::key(&sha256_hex(&token)), &invitation)?;
            super::mail::queue_mail(tx, mail.clone(), route, now)?;
            Ok(())
        })?;
        Ok(invitation)
    }

    /// The pending invitation of a link's `token`, or 404 (unknown, used or expired).
    pub fn invitation(&self, token: &str) -> Result<Invitation> {
        let now = self.now();
        self.db
            .read::<Invitation>(&Invitation::key(&sha256_hex(token)))?
            .filter(|i| now < i.expires_at)
            .ok_or_else(|| Error::not_found("invitation", "this link"))
    }

    /// Accepts an invitation: checks the password (10 to 128 characters), hashes it with
    /// argon2id and makes the account; the link stops working. Blocking (hashing takes tens of
    /// milliseconds): call it on a blocking thread.
    pub fn accept_invitation(&self, token: &str, password: &str) -> Result<Account> {
        let invitation = self.invitation(token)?;
        let chars = password.chars().count();
        if !PASSWORD_CHARS.contains(&chars) {
            return Err(Error::invalid(
                "password",
                format!(
                    "must be {} to {} characters long",
                    PASSWORD_CHARS.start(),
                    PASSWORD_CHARS.end()
                ),
            ));
        }
        let salt = SaltString::generate(&mut OsRng);
        let password_hash = Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map_err(|e| Error::Internal(anyhow::anyhow!("hashing a password: {e}")))?
            .to_string();
        let now = self.now();
        let account = Account {
            id: AccountId::generate(now),
            email: invitation.email.clone(),
            role: invitation.role,
            store_id: invitation.store_id.clone(),
            password_hash,
            created_at: now,
        };
        let key = Invitation::key(&sha256_hex(token));
        self.db.tx(|tx| {
            if tx.read::<Invitation>(&key)?.is_none() {
                return Err(Error::not_found("invitation", "this link"));
            }
            if tx
                .read::<AccountId>(&Account::email_key(&account.email))?
                .is_some()
            {
                return Err(Error::conflict(
                    "account_exists",
                    format!("{} already has an account", account.email),
                ));
            }
            tx.remove(&key)?;
            tx.write(&Account::key(&account.id), &account)?;
            tx.write(&Account::email_key(&account.email), &account.id)?;
            if let Some(store) = &account.store_id {
                tx.write(&Account::store_key(store, &account.id), &account.id)?;
            }
            tx.flush_on_commit();
            Ok(())
        })?;
        Ok(account)
    }

    /// An account.
    pub fn account(&self, id: &AccountId) -> Result<Account> {
        self.db
            .read(&Account::key(id))?
            .ok_or_else(|| Error::not_found("account", id))
    }

    /// Signs in with an email address and a password: a new session. A wrong address or
    /// password is the same 401 (nothing tells which was wrong) and counts against the client
    /// address's failed-authentication allowance, like a wrong token; while that is used up,
    /// 429 before the password is looked at. Blocking (argon2): call it on a blocking thread.
    pub fn sign_in(
        &self,
        email: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<NewSession> {
        let now = self.now();
        self.admit_unauthenticated(client)?;
        let email = email.trim().to_ascii_lowercase();
        let account = self
            .db
            .read::<AccountId>(&Account::email_key(&email))?
            .map(|id| self.account(&id))
            .transpose()?;
        // The hash is checked even for an unknown address, so that both take as long.
        let hash = account
            .as_ref()
            .map_or(dummy_hash(), |a| a.password_hash.as_str());
        let verified = PasswordHash::new(hash)
            .map(|parsed| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &parsed)
                    .is_ok()
            })
            .unwrap_or(false);
        let Some(account) = account.filter(|_| verified) else {
            self.authentication_failed(client);
            return Err(Error::Unauthorized(
                "the email address or the password is wrong".into(),
            ));
        };
        let cookie = random_hex(32);
        let session = Session {
            account_id: account.id,
            csrf: random_hex(32),
            created_at: now,
            expires_at: now
                .checked_add(SESSION_LIFETIME)
                .map_err(|e| Error::Internal(e.into()))?,
        };
        self.db.tx(|tx| {
            tx.write(&Session::key(&sha256_hex(&cookie)), &session)?;
            Ok(())
        })?;
        Ok(NewSession { cookie, session })
    }

    /// The session of a cookie's value and its account, if it is current.
    pub fn session(&self, cookie: &str) -> Result<Option<(Session, Account)>> {
        let now = self.now();
        let Some(session) = self
            .db
            .read::<Session>(&Session::key(&sha256_hex(cookie)))?
            .filter(|s| now < s.expires_at)
        else {
            return Ok(None);
        };
        let account = self.account(&session.account_id)?;
        Ok(Some((session, account)))
    }

    /// A store's owner and staff, oldest first (at most 1,000).
    pub fn store_accounts(&self, store: &StoreId) -> Result<Vec<Account>> {
        let mut accounts = Vec::new();
        let prefix = format!("store-account/{store}/");
        self.db.scan(&prefix).each(|_, id: AccountId| {
            if accounts.len() < 1_000 {
                accounts.push(self.account(&id)?.public());
            }
            Ok(())
        })?;
        Ok(accounts)
    }

    /// A developer makes an API key named `name` (1 to 64 characters): the key and its secret,
    /// `chk_` and 64 hex digits, shown this once (stored as its SHA-256). At most 20 keys each.
    pub fn create_api_key(&self, developer: &Account, name: &str) -> Result<(ApiKey, String)> {
        if developer.role != Role::Developer {
            return Err(Error::Forbidden {
                code: "not_allowed",
                message: "only developers have API keys".into(),
                field: None,
            });
        }
        let name = name.trim();
        if !(1..=64).contains(&name.chars().count()) || name.chars().any(char::is_control) {
            return Err(Error::invalid("name", "must be 1 to 64 characters"));
        }
        if self.api_keys(developer)?.len() >= MAX_API_KEYS {
            return Err(Error::conflict(
                "too_many_keys",
                format!("a developer has at most {MAX_API_KEYS} API keys: revoke one first"),
            ));
        }
        let now = self.now();
        let secret = format!("{API_KEY_PREFIX}{}", random_hex(32));
        let key = ApiKey {
            id: ApiKeyId::generate(now),
            account_id: developer.id.clone(),
            name: name.to_owned(),
            hint: secret[secret.len() - 4..].to_owned(),
            created_at: now,
        };
        let hash = sha256_hex(&secret);
        self.db.tx(|tx| {
            tx.write(&ApiKey::key(&hash), &key)?;
            tx.write(&ApiKey::account_key(&developer.id, &key.id), &hash)?;
            tx.flush_on_commit();
            Ok(())
        })?;
        Ok((key, secret))
    }

    /// A developer's API keys, oldest first.
    pub fn api_keys(&self, developer: &Account) -> Result<Vec<ApiKey>> {
        let mut keys = Vec::new();
        let prefix = format!("account-key/{}/", developer.id);
        self.db.scan(&prefix).each(|_, hash: String| {
            if let Some(key) = self.db.read::<ApiKey>(&ApiKey::key(&hash))? {
                keys.push(key);
            }
            Ok(())
        })?;
        Ok(keys)
    }

    /// Revokes one of a developer's keys: it stops working at once. Another's key, or an
    /// unknown one, is 404.
    pub fn revoke_api_key(&self, developer: &Account, id: &ApiKeyId) -> Result<ApiKey> {
        let index = ApiKey::account_key(&developer.id, id);
        self.db.tx(|tx| {
            let hash: String = tx
                .read(&index)?
                .ok_or_else(|| Error::not_found("API key", id))?;
            let key: ApiKey = tx
                .read(&ApiKey::key(&hash))?
                .ok_or_else(|| Error::not_found("API key", id))?;
            tx.remove(&ApiKey::key(&hash))?;
            tx.remove(&index)?;
            Ok(key)
        })
    }

    /// The developer whose API key `secret` is; 401 for an unknown or revoked key (the HTTP
    /// layer counts it against the client address, as for any credential).
    pub fn developer_by_key(&self, secret: &str) -> Result<Account> {
        let key = self.db.read::<ApiKey>(&ApiKey::key(&sha256_hex(secret)))?;
        match key.map(|k| self.account(&k.account_id)).transpose()? {
            Some(account) if account.role == Role::Developer => Ok(account),
            _ => Err(Error::Unauthorized("unknown or revoked API key".into())),
        }
    }

    /// Ends a session (signing out). An unknown cookie changes nothing.
    pub fn sign_out(&self, cookie: &str) -> Result<()> {
        let key = Session::key(&sha256_hex(cookie));
        self.db.tx(|tx| tx.remove(&key))
    }

    /// The store pages `account` may see: only its own store's, and only for owners and staff.
    /// Any other store, existing or not, is 404 (nothing tells that it exists).
    pub fn merchant_store(&self, account: &Account, store: &StoreId) -> Result<()> {
        if account.role.is_merchant() && account.store_id.as_ref() == Some(store) {
            self.store(store).map(|_| ())
        } else {
            Err(Error::not_found("store", store))
        }
    }

    /// Removes sessions and invitations that ended by `now` (housekeeping).
    pub fn purge_accounts(&self, now: Timestamp) -> Result<usize> {
        let decide = |_: &str, ends: &Ends| {
            if ends.expires_at <= now {
                Sweep::Remove
            } else {
                Sweep::Keep
            }
        };
        Ok(sweep(&self.db, "session/", decide, |_| Vec::new())?
            + sweep(&self.db, "invitation/", decide, |_| Vec::new())?)
    }
}
