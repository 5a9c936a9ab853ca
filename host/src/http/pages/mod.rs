//! The pages people sign in to: server-rendered HTML (askama templates under `host/templates/`,
//! checked at compile time), plain forms that work without JavaScript, nothing fetched from
//! elsewhere. Like the API handlers, each page calls the service layer and renders the answer;
//! no rule lives here.
//!
//! - Sessions: a random id in the `commerce_session` cookie (HttpOnly, SameSite=Lax, Secure when
//!   the host's public URL is `https://`).
//! - CSRF: every form carries a token. Signed-in forms carry the session's own; the sign-in and
//!   invitation forms, made before there is a session, carry the value of a `commerce_form`
//!   cookie (double submit). A form posted without the right token is refused with 403.
//! - A store's pages are its owner's and staff's only: anyone else gets 404, as for a store that
//!   does not exist.

use std::collections::BTreeMap;

use askama::Template;
use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{any, get, post};
use subtle::ConstantTimeEq as _;

mod console;

use super::AppState;
use crate::model::account::{Account, Session};
use crate::model::error::Error;
use crate::model::ids::{MessageId, OrderId, ProductId, StoreId, VariantId};
use crate::model::message::{Banner, FeedCard, Tone};
use crate::service::pagination::PageRequest;

/// The session cookie.
pub const SESSION_COOKIE: &str = "commerce_session";
/// The cookie of the forms shown before signing in (double-submit CSRF token).
pub const FORM_COOKIE: &str = "commerce_form";

/// The pages' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(home))
        .route("/sign-in", get(sign_in_form).post(sign_in))
        .route("/sign-out", post(sign_out))
        .route(
            "/invitations/{token}",
            get(invitation_form).post(accept_invitation),
        )
        .route("/stores/{store_id}", get(feed_page))
        .route(
            "/stores/{store_id}/banners/{id}/dismiss",
            post(dismiss_banner),
        )
        .route("/stores/{store_id}/feed/{id}/dismiss", post(dismiss_card))
        .route("/stores/{store_id}/plugins", get(catalogue))
        .route(
            "/stores/{store_id}/plugins/{name}/install",
            get(consent).post(install),
        )
        .route(
            "/stores/{store_id}/installations/{id}/uninstall",
            post(uninstall),
        )
        .route(
            "/stores/{store_id}/installations/{id}/settings",
            get(settings_form).post(save_settings),
        )
        .route("/stores/{store_id}/messages", get(messages))
        .route("/stores/{store_id}/staff", get(staff).post(invite_staff))
        .route("/stores/{store_id}/products/{id}", get(product_page))
        .route(
            "/stores/{store_id}/products/{id}/variants/{variant}/stock",
            post(set_stock),
        )
        .route("/stores/{store_id}/orders/{id}", get(order_page))
        .route("/stores/{store_id}/{*rest}", any(no_store_page))
        .merge(console::router())
}

/// A page's failure, rendered as a page; or no session, which sends the browser to sign in.
enum PageError {
    Failed(Error),
    SignIn,
}

impl From<Error> for PageError {
    fn from(e: Error) -> Self {
        Self::Failed(e)
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    title: &'a str,
    message: String,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let e = match self {
            PageError::SignIn => return to_sign_in(),
            PageError::Failed(e) => e,
        };
        let status = e.status();
        let (title, message) = match &e {
            Error::NotFound { .. } | Error::NoRoute(_) => {
                ("Not found", "There is no such page.".to_owned())
            }
            Error::Internal(e) => {
                tracing::error!(error = %format!("{e:#}"), "a page failed");
                (
                    "Something went wrong",
                    "The page could not be shown. Try again in a moment.".to_owned(),
                )
            }
            other => ("Refused", other.to_string()),
        };
        let mut response = html(status, &ErrorPage { title, message });
        if let Error::RateLimited { retry_after } | Error::AuthRateLimited { retry_after } = &e
            && let Ok(v) = HeaderValue::from_str(&retry_after.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }
}

type PageResult = Result<Response, PageError>;

/// An id from a page's path: one that does not parse names nothing, so it is not found.
fn page_id<T: std::str::FromStr>(kind: &'static str, raw: &str) -> Result<T, PageError> {
    raw.parse()
        .map_err(|_| PageError::Failed(Error::not_found(kind, raw)))
}

/// Marks a response as a rendered page, so that the error layer keeps its HTML body.
#[derive(Debug, Clone, Copy)]
pub struct Rendered;

fn html(status: StatusCode, page: &impl Template) -> Response {
    match page.render() {
        Ok(body) => {
            let mut response = (
                status,
                [
                    (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                    (header::CACHE_CONTROL, "no-store"),
                    (header::X_FRAME_OPTIONS, "DENY"),
                ],
                body,
            )
                .into_response();
            response.extensions_mut().insert(Rendered);
            response
        }
        Err(e) => {
            tracing::error!(error = %e, "rendering a page");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty() && v.len() <= 128)
}

/// `Set-Cookie` for `name=value` (HttpOnly, SameSite=Lax, Path=/; Secure on an https host).
fn set_cookie(app: &AppState, name: &str, value: &str, max_age_secs: i64) -> HeaderValue {
    let secure = if app.service.public_url.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{name}={value}; HttpOnly; SameSite=Lax; Path=/; Max-Age={max_age_secs}{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Whether `sent` (a form's `csrf` field) is `expected`, in constant time.
fn csrf_ok(sent: Option<&String>, expected: &str) -> bool {
    sent.is_some_and(|s| {
        !expected.is_empty() && bool::from(s.as_bytes().ct_eq(expected.as_bytes()))
    })
}

fn csrf_refused() -> PageError {
    PageError::Failed(Error::Forbidden {
        code: "csrf",
        message: "This form is out of date or did not come from this site. Go back, reload the page and send it again.".into(),
        field: Some("csrf".into()),
    })
}

/// A form's fields (a body of `application/x-www-form-urlencoded`, at most 16 KiB).
async fn form(req: Request) -> Result<BTreeMap<String, String>, PageError> {
    let bytes = axum::body::to_bytes(req.into_body(), 16 * 1024)
        .await
        .map_err(|_| PageError::Failed(Error::PayloadTooLarge { limit: 16 * 1024 }))?;
    Ok(form_urlencoded::parse(&bytes).into_owned().collect())
}

/// The current session and its account, from the request's cookie.
async fn session(
    app: &AppState,
    headers: &HeaderMap,
) -> Result<Option<(Session, Account)>, PageError> {
    let Some(id) = cookie(headers, SESSION_COOKIE).map(str::to_owned) else {
        return Ok(None);
    };
    let service = app.service.clone();
    blocking(move || service.session(&id)).await
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::model::error::Result<T> + Send + 'static,
) -> Result<T, PageError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| PageError::Failed(Error::Internal(anyhow::anyhow!("a page's task: {e}"))))?
        .map_err(PageError::Failed)
}

fn to_sign_in() -> Response {
    Redirect::to("/sign-in").into_response()
}

fn new_form_token() -> String {
    crate::service::auth::new_token()
}

// --- Signing in -------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage<'a> {
    csrf: &'a str,
    email: &'a str,
    error: Option<&'a str>,
    notice: Option<&'a str>,
}

/// The sign-in form with its form token (the existing one, or a new cookie).
fn sign_in_page(
    app: &AppState,
    headers: &HeaderMap,
    status: StatusCode,
    email: &str,
    error: Option<&str>,
    notice: Option<&str>,
) -> Response {
    let (token, fresh) = match cookie(headers, FORM_COOKIE) {
        Some(t) => (t.to_owned(), false),
        None => (new_form_token(), true),
    };
    let mut response = html(
        status,
        &SignInPage {
            csrf: &token,
            email,
            error,
            notice,
        },
    );
    if fresh {
        response.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(app, FORM_COOKIE, &token, 3600 * 24),
        );
    }
    response
}

async fn home(State(app): State<AppState>, headers: HeaderMap) -> PageResult {
    let Some((_, account)) = session(&app, &headers).await? else {
        return Ok(to_sign_in());
    };
    match (&account.role, &account.store_id) {
        (role, Some(store)) if role.is_merchant() => {
            Ok(Redirect::to(&format!("/stores/{store}")).into_response())
        }
        _ => Ok(Redirect::to("/developer").into_response()),
    }
}

async fn sign_in_form(State(app): State<AppState>, headers: HeaderMap) -> PageResult {
    if session(&app, &headers).await?.is_some() {
        return Ok(Redirect::to("/").into_response());
    }
    Ok(sign_in_page(&app, &headers, StatusCode::OK, "", None, None))
}

async fn sign_in(State(app): State<AppState>, req: Request) -> PageResult {
    let headers = req.headers().clone();
    let client = super::serve::client_addr(&req).map(|a| a.ip());
    let fields = form(req).await?;
    let expected = cookie(&headers, FORM_COOKIE).unwrap_or_default();
    if !csrf_ok(fields.get("csrf"), expected) {
        return Err(csrf_refused());
    }
    let email = fields.get("email").cloned().unwrap_or_default();
    let password = fields.get("password").cloned().unwrap_or_default();
    let service = app.service.clone();
    let signed = {
        let email = email.clone();
        blocking(move || Ok(service.sign_in(&email, &password, client))).await?
    };
    match signed {
        Ok(new) => {
            let mut response = Redirect::to("/").into_response();
            let age = crate::service::accounts::SESSION_LIFETIME.as_secs();
            response.headers_mut().append(
                header::SET_COOKIE,
                set_cookie(&app, SESSION_COOKIE, &new.cookie, age),
            );
            Ok(response)
        }
        Err(Error::Unauthorized(message)) => Ok(sign_in_page(
            &app,
            &headers,
            StatusCode::UNAUTHORIZED,
            &email,
            Some(&message),
            None,
        )),
        Err(e) => Err(PageError::Failed(e)),
    }
}

async fn sign_out(State(app): State<AppState>, req: Request) -> PageResult {
    let headers = req.headers().clone();
    let fields = form(req).await?;
    let Some((session, _)) = session(&app, &headers).await? else {
        return Ok(to_sign_in());
    };
    if !csrf_ok(fields.get("csrf"), &session.csrf) {
        return Err(csrf_refused());
    }
    if let Some(id) = cookie(&headers, SESSION_COOKIE).map(str::to_owned) {
        let service = app.service.clone();
        blocking(move || service.sign_out(&id)).await?;
    }
    let mut response = to_sign_in();
    response
        .headers_mut()
        .append(header::SET_COOKIE, set_cookie(&app, SESSION_COOKIE, "", 0));
    Ok(response)
}

// --- Invitations ------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "invitation.html")]
struct InvitationPage<'a> {
    csrf: &'a str,
    email: &'a str,
    what: String,
    error: Option<&'a str>,
}

async fn invitation_page(
    app: &AppState,
    headers: &HeaderMap,
    token: String,
    status: StatusCode,
    error: Option<&str>,
) -> PageResult {
    let service = app.service.clone();
    let invitation = blocking(move || service.invitation(&token)).await?;
    let what = match &invitation.store_id {
        Some(store) => {
            let service = app.service.clone();
            let store = store.clone();
            let domain = blocking(move || service.store(&store)).await?.domain;
            format!("{} of {domain}", invitation.role.as_str())
        }
        None => "a plugin developer".to_owned(),
    };
    let (form_token, fresh) = match cookie(headers, FORM_COOKIE) {
        Some(t) => (t.to_owned(), false),
        None => (new_form_token(), true),
    };
    let mut response = html(
        status,
        &InvitationPage {
            csrf: &form_token,
            email: &invitation.email,
            what,
            error,
        },
    );
    if fresh {
        response.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(app, FORM_COOKIE, &form_token, 3600 * 24),
        );
    }
    Ok(response)
}

async fn invitation_form(
    State(app): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
) -> PageResult {
    invitation_page(&app, &headers, token, StatusCode::OK, None).await
}

async fn accept_invitation(
    State(app): State<AppState>,
    Path(token): Path<String>,
    req: Request,
) -> PageResult {
    let headers = req.headers().clone();
    let fields = form(req).await?;
    if !csrf_ok(
        fields.get("csrf"),
        cookie(&headers, FORM_COOKIE).unwrap_or_default(),
    ) {
        return Err(csrf_refused());
    }
    let password = fields.get("password").cloned().unwrap_or_default();
    if fields.get("confirm") != Some(&password) {
        return invitation_page(
            &app,
            &headers,
            token,
            StatusCode::BAD_REQUEST,
            Some("The two passwords differ."),
        )
        .await;
    }
    let service = app.service.clone();
    let accepted = {
        let token = token.clone();
        blocking(move || Ok(service.accept_invitation(&token, &password))).await?
    };
    match accepted {
        Ok(account) => Ok(sign_in_page(
            &app,
            &headers,
            StatusCode::OK,
            &account.email,
            None,
            Some("Your password is set. Sign in."),
        )),
        Err(Error::Validation { message, .. }) => {
            let error = format!("The password {message}.");
            invitation_page(&app, &headers, token, StatusCode::BAD_REQUEST, Some(&error)).await
        }
        Err(e) => Err(PageError::Failed(e)),
    }
}

// --- The merchant's pages ---------------------------------------------------------------------

/// The bar at the top of signed-in pages.
struct Top {
    heading: String,
    email: String,
    csrf: String,
    /// The store's pages, for the navigation (merchants).
    store_path: Option<String>,
    /// A line to show once (after an action).
    notice: Option<String>,
}

impl Top {
    fn account(account: &Account, session: &Session, heading: String) -> Self {
        Self {
            heading,
            email: account.email.clone(),
            csrf: session.csrf.clone(),
            store_path: None,
            notice: None,
        }
    }
}

struct BannerView {
    id: MessageId,
    tone: &'static str,
    title: String,
    body: String,
    plugin: String,
    ctas: Vec<CtaView>,
}

struct CtaView {
    label: String,
    href: Option<String>,
    dismiss: bool,
}

impl From<Banner> for BannerView {
    fn from(b: Banner) -> Self {
        Self {
            id: b.id,
            tone: match b.tone {
                Tone::Info => "info",
                Tone::Warn => "warn",
                Tone::Success => "success",
            },
            title: b.title,
            body: b.body,
            plugin: b.plugin,
            ctas: b
                .ctas
                .into_iter()
                .map(|c| CtaView {
                    label: c.label,
                    href: c.href,
                    dismiss: c.dismiss == Some(true),
                })
                .collect(),
        }
    }
}

#[derive(Template)]
#[template(path = "feed.html")]
struct FeedPage {
    top: Top,
    store_path: String,
    banners: Vec<BannerView>,
    cards: Vec<FeedCard>,
}

/// The signed-in member of `store_id`'s staff, else a redirect to sign in or a 404.
async fn merchant(
    app: &AppState,
    headers: &HeaderMap,
    store_id: &str,
) -> Result<(Session, Account, StoreId), PageError> {
    let Some((session, account)) = session(app, headers).await? else {
        return Err(PageError::SignIn);
    };
    let store: StoreId = page_id("store", store_id)?;
    let service = app.service.clone();
    let (checked_account, checked_store) = (account.clone(), store.clone());
    blocking(move || service.merchant_store(&checked_account, &checked_store)).await?;
    Ok((session, account, store))
}

async fn feed_page(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
    headers: HeaderMap,
) -> PageResult {
    let (session, account, store) = merchant(&app, &headers, &store_id).await?;
    let service = app.service.clone();
    let page_of = PageRequest::first;
    let (domain, banners, cards) = {
        let store = store.clone();
        blocking(move || {
            let domain = service.store(&store)?.domain;
            let banners = service.active_banners(&store, &page_of(50))?.data;
            let cards = service.open_feed(&store, &page_of(100))?.data;
            Ok((domain, banners, cards))
        })
        .await?
    };
    Ok(html(
        StatusCode::OK,
        &FeedPage {
            top: store_top(&account, &session, &store, domain),
            store_path: format!("/stores/{store}"),
            banners: banners.into_iter().map(BannerView::from).collect(),
            cards,
        },
    ))
}

async fn dismiss(
    app: AppState,
    store_id: String,
    id: String,
    req: Request,
    what: fn(&crate::service::Service, &StoreId, &MessageId) -> crate::model::error::Result<()>,
) -> PageResult {
    let headers = req.headers().clone();
    let fields = form(req).await?;
    let (session, _, store) = merchant(&app, &headers, &store_id).await?;
    if !csrf_ok(fields.get("csrf"), &session.csrf) {
        return Err(csrf_refused());
    }
    let id: MessageId = page_id("message", &id)?;
    let service = app.service.clone();
    let target = store.clone();
    blocking(move || what(&service, &target, &id)).await?;
    Ok(Redirect::to(&format!("/stores/{store}")).into_response())
}

async fn dismiss_banner(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    req: Request,
) -> PageResult {
    dismiss(app, store_id, id, req, |s, store, id| {
        s.dismiss_banner(store, id).map(|_| ())
    })
    .await
}

async fn dismiss_card(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    req: Request,
) -> PageResult {
    dismiss(app, store_id, id, req, |s, store, id| {
        s.dismiss_feed_card(store, id).map(|_| ())
    })
    .await
}

/// The top bar of a store's pages.
fn store_top(account: &Account, session: &Session, store: &StoreId, domain: String) -> Top {
    Top {
        store_path: Some(format!("/stores/{store}")),
        ..Top::account(account, session, domain)
    }
}

/// A signed-in merchant of the store with the store's domain, for a store page.
struct Merchant {
    session: Session,
    account: Account,
    store: StoreId,
    domain: String,
}

impl Merchant {
    fn top(&self) -> Top {
        store_top(
            &self.account,
            &self.session,
            &self.store,
            self.domain.clone(),
        )
    }

    fn path(&self) -> String {
        format!("/stores/{}", self.store)
    }
}

/// [`merchant`] with the store's domain; `Err` holds the redirect to sign in.
async fn store_member(
    app: &AppState,
    headers: &HeaderMap,
    store_id: &str,
) -> Result<Merchant, PageError> {
    let (session, account, store) = merchant(app, headers, store_id).await?;
    let service = app.service.clone();
    let id = store.clone();
    let domain = blocking(move || service.store(&id)).await?.domain;
    Ok(Merchant {
        session,
        account,
        store,
        domain,
    })
}

/// A form posted to a store page: the member, after its CSRF token is checked.
async fn store_form(
    app: &AppState,
    store_id: &str,
    req: Request,
) -> Result<(Merchant, BTreeMap<String, String>), PageError> {
    let headers = req.headers().clone();
    let fields = form(req).await?;
    let member = store_member(app, &headers, store_id).await?;
    if !csrf_ok(fields.get("csrf"), &member.session.csrf) {
        return Err(csrf_refused());
    }
    Ok((member, fields))
}

/// What a scope lets a plugin do, in the merchant's words.
fn scope_meaning(scope: &str) -> &'static str {
    match scope {
        "orders.read" => "See your orders",
        "orders.write" => "Create and change your orders",
        "products.read" => "See your products, prices and stock",
        "products.write" => "Create and change your products, prices and stock",
        "customers.read" => "See your customers and their contact details",
        "customers.write" => "Create and change your customers",
        _ => "A permission this host does not describe",
    }
}

/// The serde name of a unit variant (`Channel::Sms` → `sms`).
fn wire_name(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

struct PluginView {
    name: String,
    version: String,
    description: Option<String>,
    /// The store's active installation of it.
    installation: Option<String>,
}

#[derive(Template)]
#[template(path = "plugins.html")]
struct CataloguePage {
    top: Top,
    store_path: String,
    plugins: Vec<PluginView>,
}

/// The store's active installations by plugin name.
fn active_installations(
    service: &crate::service::Service,
    store: &StoreId,
) -> crate::model::error::Result<BTreeMap<String, crate::model::store::Installation>> {
    let mut found = BTreeMap::new();
    let mut page = PageRequest::first(250);
    loop {
        let listed = service.list_installations(store, &page)?;
        for i in listed.data {
            if i.status == crate::model::store::InstallationStatus::Active {
                found.insert(i.plugin.clone(), i);
            }
        }
        match listed.page.next_cursor {
            Some(cursor) if found.len() < 10_000 => page = PageRequest::after(250, cursor),
            _ => return Ok(found),
        }
    }
}

async fn catalogue(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
    headers: HeaderMap,
) -> PageResult {
    let member = store_member(&app, &headers, &store_id).await?;
    let service = app.service.clone();
    let store = member.store.clone();
    let plugins = blocking(move || {
        let installed = active_installations(&service, &store)?;
        let listed = service.list_plugins(&PageRequest::first(250))?;
        Ok(listed
            .data
            .into_iter()
            .map(|p| PluginView {
                installation: installed.get(&p.name).map(|i| i.id.to_string()),
                name: p.name,
                version: p.version,
                description: p.manifest.description,
            })
            .collect::<Vec<_>>())
    })
    .await?;
    let mut top = member.top();
    top.notice = notice(&headers);
    let page = html(
        StatusCode::OK,
        &CataloguePage {
            top,
            store_path: member.path(),
            plugins,
        },
    );
    Ok(shown(&app, page, &headers))
}

/// A notice carried in the `commerce_notice` cookie by the redirect after an action.
fn notice(headers: &HeaderMap) -> Option<String> {
    let raw = cookie(headers, NOTICE_COOKIE)?;
    let text: String = form_urlencoded::parse(format!("n={raw}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())?;
    Some(text.chars().take(200).collect())
}

/// The cookie of a one-time notice shown by the next page.
const NOTICE_COOKIE: &str = "commerce_notice";

/// A redirect to `to` that shows `text` once there.
fn redirect_with_notice(app: &AppState, to: &str, text: &str) -> Response {
    let mut response = Redirect::to(to).into_response();
    let encoded: String = form_urlencoded::byte_serialize(text.as_bytes()).collect();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(app, NOTICE_COOKIE, &encoded, 60),
    );
    response
}

/// Clears the notice once a page showed it.
fn shown(app: &AppState, mut response: Response, headers: &HeaderMap) -> Response {
    if cookie(headers, NOTICE_COOKIE).is_some() {
        response
            .headers_mut()
            .append(header::SET_COOKIE, set_cookie(app, NOTICE_COOKIE, "", 0));
    }
    response
}

#[derive(Template)]
#[template(path = "consent.html")]
struct ConsentPage {
    top: Top,
    store_path: String,
    name: String,
    version: String,
    description: Option<String>,
    scopes: Vec<(String, &'static str)>,
    events: String,
    webhooks: String,
    contact: String,
}

async fn consent(
    State(app): State<AppState>,
    Path((store_id, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> PageResult {
    let member = store_member(&app, &headers, &store_id).await?;
    let service = app.service.clone();
    let plugin = blocking(move || service.plugin(&name)).await?;
    let m = plugin.manifest;
    Ok(html(
        StatusCode::OK,
        &ConsentPage {
            top: member.top(),
            store_path: member.path(),
            scopes: m
                .scopes
                .iter()
                .map(|s| (s.clone(), scope_meaning(s)))
                .collect(),
            events: m.events.join(", "),
            webhooks: m
                .webhooks
                .iter()
                .map(|w| w.url.clone())
                .collect::<Vec<_>>()
                .join(", "),
            contact: m.contact_email,
            name: m.name,
            version: m.version,
            description: m.description,
        },
    ))
}

#[derive(Template)]
#[template(path = "installed.html")]
struct InstalledPage {
    top: Top,
    store_path: String,
    name: String,
    token: String,
}

async fn install(
    State(app): State<AppState>,
    Path((store_id, name)): Path<(String, String)>,
    req: Request,
) -> PageResult {
    let (member, _) = store_form(&app, &store_id, req).await?;
    let service = app.service.clone();
    let store = member.store.clone();
    let plugin_name = name.clone();
    let (installed, runs_here) = blocking(move || {
        let runs_here = service.plugin(&plugin_name)?.component.is_some();
        Ok((service.install(&store, &plugin_name)?, runs_here))
    })
    .await?;
    if runs_here {
        return Ok(redirect_with_notice(
            &app,
            &format!("{}/plugins", member.path()),
            &format!("{name} is installed."),
        ));
    }
    // An external plugin calls the store with the installation's token: shown this once.
    Ok(html(
        StatusCode::OK,
        &InstalledPage {
            top: member.top(),
            store_path: member.path(),
            name,
            token: installed.token,
        },
    ))
}

async fn uninstall(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    req: Request,
) -> PageResult {
    let (member, _) = store_form(&app, &store_id, req).await?;
    let id: crate::model::ids::InstallationId = page_id("installation", &id)?;
    let service = app.service.clone();
    let store = member.store.clone();
    let gone = blocking(move || service.uninstall(&store, &id)).await?;
    Ok(redirect_with_notice(
        &app,
        &format!("{}/plugins", member.path()),
        &format!("{} is uninstalled.", gone.plugin),
    ))
}

#[derive(Template)]
#[template(path = "settings.html")]
struct SettingsPage {
    top: Top,
    store_path: String,
    plugin: String,
    settings: String,
    error: Option<String>,
}

async fn settings_form(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> PageResult {
    let member = store_member(&app, &headers, &store_id).await?;
    let id: crate::model::ids::InstallationId = page_id("installation", &id)?;
    let service = app.service.clone();
    let store = member.store.clone();
    let installation = blocking(move || service.installation(&store, &id)).await?;
    if installation.status != crate::model::store::InstallationStatus::Active {
        return Err(PageError::Failed(Error::not_found(
            "installation",
            &installation.id,
        )));
    }
    let mut top = member.top();
    top.notice = notice(&headers);
    let page = html(
        StatusCode::OK,
        &SettingsPage {
            top,
            store_path: member.path(),
            plugin: installation.plugin,
            settings: serde_json::to_string_pretty(&installation.settings).unwrap_or_default(),
            error: None,
        },
    );
    Ok(shown(&app, page, &headers))
}

async fn save_settings(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    req: Request,
) -> PageResult {
    let (member, fields) = store_form(&app, &store_id, req).await?;
    let id: crate::model::ids::InstallationId = page_id("installation", &id)?;
    let text = fields.get("settings").cloned().unwrap_or_default();
    let parsed = serde_json::from_str::<serde_json::Value>(&text)
        .map_err(|e| Error::invalid("settings", format!("is not JSON: {e}")));
    let service = app.service.clone();
    let store = member.store.clone();
    let target = id.clone();
    let saved = blocking(move || {
        Ok(parsed.and_then(|settings| service.configure(&store, &target, settings)))
    })
    .await?;
    match saved {
        Ok(installation) => Ok(redirect_with_notice(
            &app,
            &format!("{}/installations/{id}/settings", member.path()),
            &format!("{}'s settings are saved.", installation.plugin),
        )),
        Err(Error::Validation { message, .. }) => {
            let service = app.service.clone();
            let store = member.store.clone();
            let plugin = blocking(move || service.installation(&store, &id))
                .await?
                .plugin;
            Ok(html(
                StatusCode::BAD_REQUEST,
                &SettingsPage {
                    top: member.top(),
                    store_path: member.path(),
                    plugin,
                    settings: text,
                    error: Some(format!("The settings {message}.")),
                },
            ))
        }
        Err(e) => Err(PageError::Failed(e)),
    }
}

struct MessageView {
    created_at: String,
    channel: String,
    to: String,
    status: String,
    plugin: String,
    summary: String,
}

#[derive(Template)]
#[template(path = "messages.html")]
struct MessagesPage {
    top: Top,
    messages: Vec<MessageView>,
}

async fn messages(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
    headers: HeaderMap,
) -> PageResult {
    let member = store_member(&app, &headers, &store_id).await?;
    let service = app.service.clone();
    let store = member.store.clone();
    let messages = blocking(move || {
        let listed = service.messages(
            &store,
            &crate::service::notifications::dashboard::MessageFilter::default(),
            &PageRequest::first(100),
        )?;
        listed
            .data
            .into_iter()
            .map(|m| {
                let summary = service.message_summary(&store, &m)?;
                let n = &m.notification;
                Ok(MessageView {
                    created_at: n.created_at.to_string(),
                    channel: wire_name(&n.channel),
                    to: m
                        .address
                        .clone()
                        .or_else(|| n.to.clone())
                        .unwrap_or_default(),
                    status: wire_name(&n.status),
                    plugin: m.plugin.clone(),
                    summary,
                })
            })
            .collect::<crate::model::error::Result<Vec<_>>>()
    })
    .await?;
    Ok(html(
        StatusCode::OK,
        &MessagesPage {
            top: member.top(),
            messages,
        },
    ))
}

// --- What plugins link to: a product (its stock) and an order -----------------------------

/// An amount in minor units as the merchant reads it, with its currency's ISO 4217 decimals
/// (`iso_currency`): two for the euro, none for the yen, three for the Kuwaiti dinar, none for
/// a code without minor units (gold), two for a code the list does not know.
fn display_amount(minor: i64, currency: &str) -> String {
    let decimals =
        iso_currency::Currency::from_code(currency).map_or(2, |c| c.exponent().unwrap_or(0));
    let sign = if minor < 0 { "-" } else { "" };
    let units = minor.unsigned_abs();
    if decimals == 0 {
        return format!("{sign}{units} {currency}");
    }
    let scale = 10u64.pow(u32::from(decimals));
    format!(
        "{sign}{}.{:0width$} {currency}",
        units / scale,
        units % scale,
        width = usize::from(decimals)
    )
}

struct VariantView {
    id: String,
    title: String,
    sku: String,
    price: String,
    stock: i64,
    threshold: String,
    low: bool,
}

#[derive(Template)]
#[template(path = "product.html")]
struct ProductPage {
    top: Top,
    path: String,
    title: String,
    status: String,
    variants: Vec<VariantView>,
}

/// A product of the store with its variants' stock, and a form to set each one's stock: where a
/// low-stock banner's "Restock" leads (`/products/{id}`).
async fn product_page(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> PageResult {
    let member = store_member(&app, &headers, &store_id).await?;
    let id: ProductId = page_id("product", &id)?;
    let service = app.service.clone();
    let store = member.store.clone();
    let product = blocking(move || service.store_product(&store, &id)).await?;
    let mut top = member.top();
    top.notice = notice(&headers);
    let page = html(
        StatusCode::OK,
        &ProductPage {
            top,
            path: format!("{}/products/{}", member.path(), product.id),
            title: product.title,
            status: wire_name(&product.status),
            variants: product
                .variants
                .into_iter()
                .map(|v| VariantView {
                    low: v
                        .low_stock_threshold
                        .is_some_and(|t| v.inventory_quantity <= t),
                    threshold: v
                        .low_stock_threshold
                        .map_or_else(|| "none".to_owned(), |t| t.to_string()),
                    price: display_amount(v.price, &v.currency),
                    id: v.id.to_string(),
                    title: v.title,
                    sku: v.sku.unwrap_or_default(),
                    stock: v.inventory_quantity,
                })
                .collect(),
        },
    );
    Ok(shown(&app, page, &headers))
}

/// The product page's form: sets one variant's stock, then shows the page again with what
/// changed (or why not).
async fn set_stock(
    State(app): State<AppState>,
    Path((store_id, id, variant)): Path<(String, String, String)>,
    req: Request,
) -> PageResult {
    let (member, fields) = store_form(&app, &store_id, req).await?;
    let product: ProductId = page_id("product", &id)?;
    let variant: VariantId = page_id("variant", &variant)?;
    let back = format!("{}/products/{product}", member.path());
    let quantity = fields.get("quantity").map(|q| q.trim()).unwrap_or_default();
    let Ok(quantity) = quantity.parse::<i64>() else {
        let text = format!("The stock must be a whole number; got \"{quantity}\".");
        return Ok(redirect_with_notice(&app, &back, &text));
    };
    let service = app.service.clone();
    let store = member.store.clone();
    let set = blocking(move || {
        let store = service.store(&store)?.reference();
        service.set_stock(&store, &product, &variant, quantity)
    })
    .await;
    let text = match set {
        Ok(level) => format!(
            "Stock set to {} (it was {}).",
            level.inventory_quantity, level.previous_quantity
        ),
        Err(PageError::Failed(
            Error::Validation { message, .. } | Error::Conflict { message, .. },
        )) => format!("The stock was not changed: {message}."),
        Err(e) => return Err(e),
    };
    Ok(redirect_with_notice(&app, &back, &text))
}

struct LineView {
    title: String,
    sku: String,
    quantity: i64,
    unit_price: String,
    total: String,
    fulfilled: i64,
    refunded: i64,
}

#[derive(Template)]
#[template(path = "order.html")]
struct OrderPage {
    top: Top,
    id: String,
    status: String,
    financial: String,
    fulfillment: String,
    email: String,
    created_at: String,
    lines: Vec<LineView>,
    subtotal: String,
    total: String,
    paid: String,
    refunded: String,
    tags: String,
    note: String,
}

/// An order of the store, read only: where a feed card about an order leads (`/orders/{id}`).
async fn order_page(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> PageResult {
    let member = store_member(&app, &headers, &store_id).await?;
    let id: OrderId = page_id("order", &id)?;
    let service = app.service.clone();
    let store = member.store.clone();
    let order = blocking(move || service.store_order(&store, &id)).await?;
    let money = |minor: i64| display_amount(minor, &order.currency);
    let page = OrderPage {
        top: member.top(),
        id: order.id.to_string(),
        status: wire_name(&order.status),
        financial: wire_name(&order.financial_status),
        fulfillment: wire_name(&order.fulfillment_status),
        email: order.email.clone().unwrap_or_default(),
        created_at: order.created_at.to_string(),
        lines: order
            .line_items
            .iter()
            .map(|l| LineView {
                title: l.title.clone(),
                sku: l.sku.clone().unwrap_or_default(),
                quantity: l.quantity,
                unit_price: money(l.unit_price),
                total: money(l.total),
                fulfilled: l.fulfilled_quantity,
                refunded: l.refunded_quantity,
            })
            .collect(),
        subtotal: money(order.subtotal),
        total: money(order.total),
        paid: money(order.total_paid),
        refunded: money(order.total_refunded),
        tags: order.tags.join(", "),
        note: order.note.clone().unwrap_or_default(),
    };
    Ok(html(StatusCode::OK, &page))
}

/// Any other path under a store, by any method: a link a plugin made to a page the host does
/// not have. Its members see the not-found page (not the API's JSON, nor a 405 for a form
/// posted there), and anyone else is sent to sign in or told the store is not found, as on the
/// store's other pages.
async fn no_store_page(
    State(app): State<AppState>,
    Path((store_id, rest)): Path<(String, String)>,
    headers: HeaderMap,
) -> PageResult {
    store_member(&app, &headers, &store_id).await?;
    Err(PageError::Failed(Error::NoRoute(format!(
        "/stores/{store_id}/{rest}"
    ))))
}

#[derive(Template)]
#[template(path = "staff.html")]
struct StaffPage {
    top: Top,
    store_path: String,
    members: Vec<(String, &'static str, String)>,
    owner: bool,
    error: Option<String>,
}

async fn staff_page(
    app: &AppState,
    member: &Merchant,
    top: Top,
    status: StatusCode,
    error: Option<String>,
) -> PageResult {
    let service = app.service.clone();
    let store = member.store.clone();
    let members = blocking(move || service.store_accounts(&store))
        .await?
        .into_iter()
        .map(|a| (a.email, a.role.as_str(), a.created_at.to_string()))
        .collect();
    Ok(html(
        status,
        &StaffPage {
            top,
            store_path: member.path(),
            members,
            owner: member.account.role == crate::model::account::Role::Owner,
            error,
        },
    ))
}

async fn staff(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
    headers: HeaderMap,
) -> PageResult {
    let member = store_member(&app, &headers, &store_id).await?;
    let mut top = member.top();
    top.notice = notice(&headers);
    let page = staff_page(&app, &member, top, StatusCode::OK, None).await?;
    Ok(shown(&app, page, &headers))
}

async fn invite_staff(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
    req: Request,
) -> PageResult {
    let (member, fields) = store_form(&app, &store_id, req).await?;
    let email = fields.get("email").cloned().unwrap_or_default();
    let service = app.service.clone();
    let by = crate::model::account::Inviter::Account(member.account.id.clone());
    let invited =
        blocking(move || Ok(service.invite(&by, &email, crate::model::account::Role::Staff, None)))
            .await?;
    match invited {
        Ok(invitation) => Ok(redirect_with_notice(
            &app,
            &format!("{}/staff", member.path()),
            &format!("An invitation is on its way to {}.", invitation.email),
        )),
        Err(e @ (Error::Validation { .. } | Error::Conflict { .. } | Error::Forbidden { .. })) => {
            let top = member.top();
            staff_page(&app, &member, top, e.status(), Some(e.to_string())).await
        }
        Err(e) => Err(PageError::Failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_is_found_among_others_and_an_empty_one_is_none() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; commerce_session=abc; commerce_form="),
        );
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&headers, FORM_COOKIE), None);
        assert_eq!(cookie(&headers, "b"), None);
    }

    #[test]
    fn csrf_needs_the_exact_token() {
        assert!(csrf_ok(Some(&"t0k".to_owned()), "t0k"));
        assert!(!csrf_ok(Some(&"t0K".to_owned()), "t0k"));
        assert!(!csrf_ok(None, "t0k"));
        assert!(!csrf_ok(Some(&String::new()), ""));
    }

    #[test]
    fn amounts_read_with_their_currencys_decimals() {
        assert_eq!(display_amount(1250, "EUR"), "12.50 EUR");
        assert_eq!(display_amount(5, "USD"), "0.05 USD");
        assert_eq!(display_amount(-1250, "EUR"), "-12.50 EUR");
        assert_eq!(display_amount(1250, "JPY"), "1250 JPY");
        assert_eq!(display_amount(1250, "KWD"), "1.250 KWD");
        assert_eq!(display_amount(3, "XAU"), "3 XAU");
        assert_eq!(display_amount(1250, "ZZZ"), "12.50 ZZZ");
        assert_eq!(display_amount(i64::MIN, "EUR"), "-92233720368547758.08 EUR");
    }

    #[test]
    fn role_names() {
        assert_eq!(crate::model::account::Role::Staff.as_str(), "staff");
    }
}
