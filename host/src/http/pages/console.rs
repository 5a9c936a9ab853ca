//! The developer console: a developer's plugins with their versions and the stores that installed
//! them, API keys, and per installation its webhook subscriptions and component as delivery
//! targets: status and pause reason, resume, secret rotation (the new secret shown once), the
//! deliveries with every attempt, replay of a failed delivery or of everything since a time, and
//! the plugin's log lines per invocation. Each action calls the operation the installation's own
//! token reaches on `/v1` (through [`crate::service::Service::developer_installation`]), so the
//! console has no rule of its own; another developer's installation is 404.

use askama::Template;
use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};

use super::*;
use crate::model::delivery::{Attempt, Delivery, DeliveryStatus, TargetRef};
use crate::model::ids::{EventId, InstallationId, WebhookId};
use crate::model::store::Installation;
use crate::model::webhook::{DeliveryFilter, ReplayRequest};
use crate::service::Actor;

/// The console's routes.
pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/developer", get(console))
        .route("/developer/keys", post(create_key))
        .route("/developer/keys/{id}/revoke", post(revoke_key))
        .route(
            "/developer/stores/{store_id}/installations/{id}",
            get(installation_page),
        )
        .route(
            "/developer/stores/{store_id}/installations/{id}/targets/{target}",
            get(target_page),
        )
        .route(
            "/developer/stores/{store_id}/installations/{id}/targets/{target}/deliveries/{event}",
            get(delivery_page),
        )
        .route(
            "/developer/stores/{store_id}/installations/{id}/targets/{target}/resume",
            post(resume),
        )
        .route(
            "/developer/stores/{store_id}/installations/{id}/targets/{target}/replay",
            post(replay),
        )
        .route(
            "/developer/stores/{store_id}/installations/{id}/targets/{target}/rotate-secret",
            post(rotate_secret),
        )
        .route(
            "/developer/stores/{store_id}/installations/{id}/targets/{target}/deliveries/{event}/resend",
            post(resend),
        )
}

/// A plugin in the console's list.
struct PluginRow {
    name: String,
    version: String,
    wit: String,
    published: String,
    versions: String,
    /// Store domain, installation page, version run, `active` or `uninstalled`.
    installations: Vec<(String, String, String, &'static str)>,
    more: bool,
}

impl From<crate::service::developer::DeveloperPlugin> for PluginRow {
    fn from(d: crate::service::developer::DeveloperPlugin) -> Self {
        let p = d.plugin;
        Self {
            wit: p
                .component
                .as_ref()
                .map(|c| format!("commerce:plugin@{}", c.wit_version))
                .unwrap_or_else(|| "external (HTTP)".to_owned()),
            published: p.published_at.to_string(),
            versions: d.versions.join(", "),
            installations: d
                .installations
                .into_iter()
                .map(|(inst, domain)| {
                    let active = inst.status == crate::model::store::InstallationStatus::Active;
                    (
                        domain,
                        installation_path(&inst.store_id, &inst.id),
                        inst.version,
                        if active { "active" } else { "uninstalled" },
                    )
                })
                .collect(),
            more: d.more,
            name: p.name,
            version: p.version,
        }
    }
}

fn installation_path(store: &StoreId, id: &InstallationId) -> String {
    format!("/developer/stores/{store}/installations/{id}")
}

#[derive(Template)]
#[template(path = "developer.html")]
struct ConsolePage {
    top: Top,
    plugins: Vec<PluginRow>,
    keys: Vec<(String, String, String, String)>,
    new_secret: Option<String>,
    error: Option<String>,
}

/// The signed-in developer; a merchant gets 404, as for any page not theirs.
async fn developer(app: &AppState, headers: &HeaderMap) -> Result<(Session, Account), PageError> {
    match session(app, headers).await? {
        None => Err(PageError::SignIn),
        Some((_, account)) if account.role != crate::model::account::Role::Developer => {
            Err(PageError::Failed(Error::not_found("page", "/developer")))
        }
        Some(found) => Ok(found),
    }
}

async fn console_page(
    app: &AppState,
    headers: &HeaderMap,
    session: Session,
    account: Account,
    status: StatusCode,
    new_secret: Option<String>,
    error: Option<String>,
) -> PageResult {
    let service = app.service.clone();
    let who = account.clone();
    let (plugins, keys) = blocking(move || {
        Ok((
            service.developer_overview(&who.id)?,
            service.api_keys(&who)?,
        ))
    })
    .await?;
    let mut top = Top::account(&account, &session, "Developer console".into());
    top.notice = notice(headers);
    let page = html(
        status,
        &ConsolePage {
            top,
            plugins: plugins.into_iter().map(PluginRow::from).collect(),
            keys: keys
                .into_iter()
                .map(|k| (k.id.to_string(), k.name, k.hint, k.created_at.to_string()))
                .collect(),
            new_secret,
            error,
        },
    );
    Ok(shown(app, page, headers))
}

async fn console(State(app): State<AppState>, headers: HeaderMap) -> PageResult {
    let (session, account) = developer(&app, &headers).await?;
    console_page(&app, &headers, session, account, StatusCode::OK, None, None).await
}

async fn create_key(State(app): State<AppState>, req: Request) -> PageResult {
    let headers = req.headers().clone();
    let fields = form(req).await?;
    let (session, account) = developer(&app, &headers).await?;
    if !csrf_ok(fields.get("csrf"), &session.csrf) {
        return Err(csrf_refused());
    }
    let name = fields.get("name").cloned().unwrap_or_default();
    let service = app.service.clone();
    let who = account.clone();
    let made = blocking(move || Ok(service.create_api_key(&who, &name))).await?;
    match made {
        Ok((_, secret)) => {
            console_page(
                &app,
                &headers,
                session,
                account,
                StatusCode::OK,
                Some(secret),
                None,
            )
            .await
        }
        Err(e @ (Error::Validation { .. } | Error::Conflict { .. })) => {
            let status = e.status();
            console_page(
                &app,
                &headers,
                session,
                account,
                status,
                None,
                Some(e.to_string()),
            )
            .await
        }
        Err(e) => Err(PageError::Failed(e)),
    }
}

async fn revoke_key(
    State(app): State<AppState>,
    Path(id): Path<String>,
    req: Request,
) -> PageResult {
    let headers = req.headers().clone();
    let fields = form(req).await?;
    let (session, account) = developer(&app, &headers).await?;
    if !csrf_ok(fields.get("csrf"), &session.csrf) {
        return Err(csrf_refused());
    }
    let id: crate::model::ids::ApiKeyId = page_id("API key", &id)?;
    let service = app.service.clone();
    let revoked = blocking(move || service.revoke_api_key(&account, &id)).await?;
    Ok(redirect_with_notice(
        &app,
        "/developer",
        &format!("The key {} is revoked.", revoked.name),
    ))
}

// --- An installation of one of the developer's plugins ------------------------------------------

/// The path parameters of an installation's pages, parsed; anything malformed is 404.
struct At {
    store: StoreId,
    id: InstallationId,
}

impl At {
    fn parse(store: &str, id: &str) -> Result<Self, PageError> {
        Ok(Self {
            store: page_id("store", store)?,
            id: page_id("installation", id)?,
        })
    }

    fn path(&self) -> String {
        installation_path(&self.store, &self.id)
    }

    fn target_path(&self, target: &Target) -> String {
        format!("{}/targets/{}", self.path(), target.segment())
    }
}

/// A delivery target of an installation: one of its webhook subscriptions, or its component.
#[derive(Clone)]
enum Target {
    Webhook(WebhookId),
    Component,
}

impl Target {
    fn parse(raw: &str) -> Result<Self, PageError> {
        if raw == "component" {
            return Ok(Self::Component);
        }
        page_id("webhook", raw).map(Self::Webhook)
    }

    fn segment(&self) -> String {
        match self {
            Self::Webhook(id) => id.to_string(),
            Self::Component => "component".to_owned(),
        }
    }

    fn reference(&self, installation: &InstallationId) -> TargetRef {
        match self {
            Self::Webhook(id) => TargetRef::Webhook(id.clone()),
            Self::Component => TargetRef::Component(installation.clone()),
        }
    }
}

/// What a console page of an installation starts from: the signed-in developer, their
/// installation (404 when the plugin is not theirs) and its actor.
struct Ctx {
    session: Session,
    account: Account,
    installation: Installation,
    actor: Actor,
    at: At,
}

impl Ctx {
    fn top(&self, heading: String, headers: &HeaderMap) -> Top {
        let mut top = Top::account(&self.account, &self.session, heading);
        top.notice = notice(headers);
        top
    }
}

async fn ctx(app: &AppState, headers: &HeaderMap, store: &str, id: &str) -> Result<Ctx, PageError> {
    let (session, account) = developer(app, headers).await?;
    let at = At::parse(store, id)?;
    let service = app.service.clone();
    let (who, s, i) = (account.id.clone(), at.store.clone(), at.id.clone());
    let (installation, actor) =
        blocking(move || service.developer_installation(&who, &s, &i)).await?;
    Ok(Ctx {
        session,
        account,
        installation,
        actor,
        at,
    })
}

/// Like [`ctx`] for a form: also checks the form's CSRF token; returns the form's fields.
async fn ctx_form(
    app: &AppState,
    store: &str,
    id: &str,
    req: Request,
) -> Result<(Ctx, BTreeMap<String, String>, HeaderMap), PageError> {
    let headers = req.headers().clone();
    let fields = form(req).await?;
    let ctx = ctx(app, &headers, store, id).await?;
    if !csrf_ok(fields.get("csrf"), &ctx.session.csrf) {
        return Err(csrf_refused());
    }
    Ok((ctx, fields, headers))
}

fn time(t: jiff::Timestamp) -> String {
    crate::model::clock::format_ts(t)
}

struct WebhookRow {
    path: String,
    segment: String,
    url: String,
    events: String,
    source: String,
    status: String,
    paused_at: Option<String>,
    reason: Option<String>,
}

struct ComponentRow {
    path: String,
    events: String,
    status: &'static str,
    paused_at: Option<String>,
    reason: Option<String>,
}

#[derive(Template)]
#[template(path = "dev_installation.html")]
struct InstallationPage {
    top: Top,
    plugin: String,
    version: String,
    status: &'static str,
    installed_at: String,
    webhooks: Vec<WebhookRow>,
    component: Option<ComponentRow>,
    /// Just rotated: the subscription, its new secret (shown this once) and when the old one
    /// stops signing.
    rotated: Option<(String, String, String)>,
}

async fn installation_page(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> PageResult {
    let ctx = ctx(&app, &headers, &store_id, &id).await?;
    render_installation(&app, &headers, ctx, None).await
}

async fn render_installation(
    app: &AppState,
    headers: &HeaderMap,
    ctx: Ctx,
    rotated: Option<(String, String, String)>,
) -> PageResult {
    let service = app.service.clone();
    let actor = ctx.actor.clone();
    let webhooks = blocking(move || {
        let first = PageRequest::parse(&crate::service::PageParams {
            limit: Some("250".into()),
            cursor: None,
        })?;
        Ok(service.list_webhooks(&actor, &first)?.data)
    })
    .await?;
    let inst = &ctx.installation;
    let active = inst.status == crate::model::store::InstallationStatus::Active;
    let component = (!inst.component_events.is_empty()).then(|| ComponentRow {
        path: ctx.at.target_path(&Target::Component),
        events: inst
            .component_events
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        status: if inst.component_paused_at.is_some() {
            "paused"
        } else {
            "active"
        },
        paused_at: inst.component_paused_at.map(time),
        reason: inst.component_pause_reason.clone(),
    });
    let page = InstallationPage {
        top: ctx.top(
            format!("{} in {}", inst.plugin, ctx.actor.store.domain),
            headers,
        ),
        plugin: inst.plugin.clone(),
        version: inst.version.clone(),
        status: if active { "active" } else { "uninstalled" },
        installed_at: time(inst.created_at),
        webhooks: webhooks
            .into_iter()
            .map(|w| {
                let target = Target::Webhook(w.id.clone());
                WebhookRow {
                    path: ctx.at.target_path(&target),
                    segment: target.segment(),
                    url: w.url,
                    events: w
                        .events
                        .iter()
                        .map(|e| e.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    source: wire_name(&w.source),
                    status: wire_name(&w.status),
                    paused_at: w.paused_at.map(time),
                    reason: w.pause_reason,
                }
            })
            .collect(),
        component,
        rotated,
    };
    Ok(shown(app, html(StatusCode::OK, &page), headers))
}

struct DeliveryRow {
    path: String,
    event_id: String,
    event_type: String,
    event_at: String,
    status: String,
    attempts: u32,
    next_attempt_at: Option<String>,
    failure: Option<String>,
    replayable: bool,
}

impl DeliveryRow {
    fn new(target_path: &str, d: Delivery) -> Self {
        Self {
            path: format!("{target_path}/deliveries/{}", d.event_id),
            event_id: d.event_id.to_string(),
            event_type: d.event_type.as_str().to_owned(),
            event_at: time(d.event_created_at),
            status: wire_name(&d.status),
            attempts: d.attempts,
            next_attempt_at: d.next_attempt_at.map(time),
            failure: d.failure,
            replayable: d.status != DeliveryStatus::Succeeded,
        }
    }
}

struct AttemptRow {
    id: String,
    at: String,
    event_id: String,
    retry: u32,
    succeeded: bool,
    status_code: String,
    duration_ms: u64,
    response: String,
    error: String,
    /// Level and text of each line the plugin logged.
    logs: Vec<(String, String)>,
}

impl From<Attempt> for AttemptRow {
    fn from(a: Attempt) -> Self {
        Self {
            id: a.id.to_string(),
            at: time(a.attempted_at),
            event_id: a.event_id.to_string(),
            retry: a.retry,
            succeeded: a.succeeded,
            status_code: a.status_code.map(|c| c.to_string()).unwrap_or_default(),
            duration_ms: a.duration_ms,
            response: a.response_body.unwrap_or_default(),
            error: a.error.unwrap_or_default(),
            logs: a.logs.into_iter().map(|l| (l.level, l.message)).collect(),
        }
    }
}

#[derive(Template)]
#[template(path = "dev_target.html")]
struct TargetPage {
    top: Top,
    installation_path: String,
    path: String,
    title: String,
    webhook: bool,
    status: &'static str,
    reason: Option<String>,
    filter: String,
    deliveries: Vec<DeliveryRow>,
    next: Option<String>,
    attempts: Vec<AttemptRow>,
    since: String,
    error: Option<String>,
}

/// The query of a target's page: a status filter and a cursor.
#[derive(Debug, Default, serde::Deserialize)]
struct TargetQuery {
    status: Option<String>,
    cursor: Option<String>,
}

async fn target_page(
    State(app): State<AppState>,
    Path((store_id, id, target)): Path<(String, String, String)>,
    axum::extract::Query(query): axum::extract::Query<TargetQuery>,
    headers: HeaderMap,
) -> PageResult {
    let ctx = ctx(&app, &headers, &store_id, &id).await?;
    let target = Target::parse(&target)?;
    render_target(&app, &headers, ctx, target, query, StatusCode::OK, None).await
}

async fn render_target(
    app: &AppState,
    headers: &HeaderMap,
    ctx: Ctx,
    target: Target,
    query: TargetQuery,
    status: StatusCode,
    error: Option<String>,
) -> PageResult {
    let service = app.service.clone();
    let actor = ctx.actor.clone();
    let (store, inst) = (ctx.at.store.clone(), ctx.at.id.clone());
    let (t, filter) = (
        target.clone(),
        query.status.clone().filter(|s| !s.is_empty()),
    );
    let cursor = query.cursor.clone().filter(|c| !c.is_empty());
    let (state, deliveries, attempts) = blocking(move || {
        let listing = DeliveryFilter {
            status: filter.clone(),
            limit: Some("50".into()),
            cursor,
        };
        let recent = PageRequest::parse(&crate::service::PageParams {
            limit: Some("20".into()),
            cursor: None,
        })?;
        match &t {
            Target::Webhook(wh) => {
                let sub = service.own_subscription(&actor, wh)?.view();
                let deliveries = service.list_deliveries(&actor, wh, &listing)?;
                let attempts = service.list_attempts(&actor, wh, &recent)?;
                let paused = sub.paused_at.is_some();
                Ok(((sub.url, paused, sub.pause_reason), deliveries, attempts))
            }
            Target::Component => {
                let installation = service.installation(&store, &inst)?;
                if installation.component_events.is_empty() {
                    return Err(Error::not_found("component", &inst));
                }
                let target = TargetRef::Component(inst.clone());
                let status = crate::service::webhooks::status_filter(filter.as_deref())?;
                let deliveries =
                    service.list_target_deliveries(&store, &target, status, &listing)?;
                let attempts = service.list_component_attempts(&store, &inst, &recent)?;
                Ok((
                    (
                        "component".to_owned(),
                        installation.component_paused_at.is_some(),
                        installation.component_pause_reason,
                    ),
                    deliveries,
                    attempts,
                ))
            }
        }
    })
    .await?;
    let ((title, paused, reason), deliveries, attempts) = (state, deliveries, attempts);
    let path = ctx.at.target_path(&target);
    let filter = query.status.unwrap_or_default();
    let next = deliveries.page.next_cursor.as_ref().map(|c| {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if !filter.is_empty() {
            q.append_pair("status", &filter);
        }
        q.append_pair("cursor", c);
        format!("{path}?{}", q.finish())
    });
    let since = app
        .service
        .now()
        .checked_sub(jiff::SignedDuration::from_hours(24))
        .map(time)
        .unwrap_or_default();
    let page = TargetPage {
        top: ctx.top(
            format!("{} in {}", ctx.installation.plugin, ctx.actor.store.domain),
            headers,
        ),
        installation_path: ctx.at.path(),
        webhook: matches!(target, Target::Webhook(_)),
        status: if paused { "paused" } else { "active" },
        reason,
        title,
        deliveries: deliveries
            .data
            .into_iter()
            .map(|d| DeliveryRow::new(&path, d))
            .collect(),
        attempts: attempts.data.into_iter().map(AttemptRow::from).collect(),
        next,
        filter,
        since,
        error,
        path,
    };
    Ok(shown(app, html(status, &page), headers))
}

#[derive(Template)]
#[template(path = "dev_delivery.html")]
struct DeliveryPage {
    top: Top,
    target_path: String,
    path: String,
    webhook: bool,
    delivery: DeliveryRow,
    replays: u32,
    attempts: Vec<AttemptRow>,
}

async fn delivery_page(
    State(app): State<AppState>,
    Path((store_id, id, target, event)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> PageResult {
    let ctx = ctx(&app, &headers, &store_id, &id).await?;
    let target = Target::parse(&target)?;
    let event: EventId = page_id("delivery", &event)?;
    let service = app.service.clone();
    let (actor, store, t) = (ctx.actor.clone(), ctx.at.store.clone(), target.clone());
    let reference = target.reference(&ctx.at.id);
    let (delivery, attempts) = blocking(move || {
        if let Target::Webhook(wh) = &t {
            service.own_subscription(&actor, wh)?;
        }
        service.target_delivery(&store, &reference, &event)
    })
    .await?;
    let target_path = ctx.at.target_path(&target);
    let replays = delivery.replays;
    let row = DeliveryRow::new(&target_path, delivery);
    let page = DeliveryPage {
        top: ctx.top(
            format!("{} in {}", ctx.installation.plugin, ctx.actor.store.domain),
            &headers,
        ),
        path: row.path.clone(),
        webhook: matches!(target, Target::Webhook(_)),
        delivery: row,
        replays,
        attempts: attempts.into_iter().rev().map(AttemptRow::from).collect(),
        target_path,
    };
    Ok(shown(&app, html(StatusCode::OK, &page), &headers))
}

/// Where an action returns to: the page it was posted from (`back`), when that is one of this
/// target's pages, else the target's page.
fn back_to(fields: &BTreeMap<String, String>, target_path: &str) -> String {
    match fields.get("back") {
        Some(back) if back.starts_with(target_path) && !back.contains("//") => back.clone(),
        _ => target_path.to_owned(),
    }
}

/// A refused action shown on the target's page, with the refusal's status; anything else is an
/// error page.
async fn refused(
    app: &AppState,
    headers: &HeaderMap,
    ctx: Ctx,
    target: Target,
    e: Error,
) -> PageResult {
    match e {
        e @ (Error::Validation { .. } | Error::Conflict { .. }) => {
            let status = e.status();
            let query = TargetQuery::default();
            render_target(
                app,
                headers,
                ctx,
                target,
                query,
                status,
                Some(e.to_string()),
            )
            .await
        }
        e => Err(PageError::Failed(e)),
    }
}

async fn resume(
    State(app): State<AppState>,
    Path((store_id, id, target)): Path<(String, String, String)>,
    req: Request,
) -> PageResult {
    let (ctx, _, headers) = ctx_form(&app, &store_id, &id, req).await?;
    let target = Target::parse(&target)?;
    let service = app.service.clone();
    let (actor, store, inst, t) = (
        ctx.actor.clone(),
        ctx.at.store.clone(),
        ctx.at.id.clone(),
        target.clone(),
    );
    let done = blocking(move || {
        Ok(match &t {
            Target::Webhook(wh) => service.resume_webhook(&actor, wh).map(|_| ()),
            Target::Component => service.resume_component(&store, &inst).map(|_| ()),
        })
    })
    .await?;
    match done {
        Ok(()) => Ok(redirect_with_notice(
            &app,
            &ctx.at.target_path(&target),
            "Resumed: new events are delivered again. Replay the ones that failed meanwhile.",
        )),
        Err(e) => refused(&app, &headers, ctx, target, e).await,
    }
}

async fn replay(
    State(app): State<AppState>,
    Path((store_id, id, target)): Path<(String, String, String)>,
    req: Request,
) -> PageResult {
    let (ctx, fields, headers) = ctx_form(&app, &store_id, &id, req).await?;
    let target = Target::parse(&target)?;
    let request = ReplayRequest {
        event_id: fields.get("event_id").filter(|v| !v.is_empty()).cloned(),
        since: fields.get("since").filter(|v| !v.is_empty()).cloned(),
    };
    let service = app.service.clone();
    let (actor, store, inst, t) = (
        ctx.actor.clone(),
        ctx.at.store.clone(),
        ctx.at.id.clone(),
        target.clone(),
    );
    let done = blocking(move || {
        Ok(match &t {
            Target::Webhook(wh) => service.replay(&actor, wh, &request),
            Target::Component => service.replay_component(&store, &inst, &request),
        })
    })
    .await?;
    match done {
        Ok(result) => {
            let to = back_to(&fields, &ctx.at.target_path(&target));
            let text = match result.requeued {
                1 => "Replayed: 1 delivery is queued.".to_owned(),
                n => format!("Replayed: {n} deliveries are queued."),
            };
            Ok(redirect_with_notice(&app, &to, &text))
        }
        Err(e) => refused(&app, &headers, ctx, target, e).await,
    }
}

async fn resend(
    State(app): State<AppState>,
    Path((store_id, id, target, event)): Path<(String, String, String, String)>,
    req: Request,
) -> PageResult {
    let (ctx, fields, headers) = ctx_form(&app, &store_id, &id, req).await?;
    let target = Target::parse(&target)?;
    let Target::Webhook(wh) = target.clone() else {
        return Err(PageError::Failed(Error::not_found("page", "resend")));
    };
    let service = app.service.clone();
    let actor = ctx.actor.clone();
    let done = blocking(move || Ok(service.resend(&actor, &wh, &event))).await?;
    match done {
        Ok(_) => {
            let to = back_to(&fields, &ctx.at.target_path(&target));
            Ok(redirect_with_notice(
                &app,
                &to,
                "Resent: the delivery is queued.",
            ))
        }
        Err(e) => refused(&app, &headers, ctx, target, e).await,
    }
}

async fn rotate_secret(
    State(app): State<AppState>,
    Path((store_id, id, target)): Path<(String, String, String)>,
    req: Request,
) -> PageResult {
    let (ctx, _, headers) = ctx_form(&app, &store_id, &id, req).await?;
    let Target::Webhook(wh) = Target::parse(&target)? else {
        return Err(PageError::Failed(Error::not_found("page", "rotate-secret")));
    };
    let service = app.service.clone();
    let actor = ctx.actor.clone();
    let (rotated, secret) = blocking(move || service.rotate_to_random_secret(&actor, &wh)).await?;
    let shown_once = (
        rotated.webhook.id.to_string(),
        secret,
        time(rotated.previous_secret_expires_at),
    );
    // Rendered in answer to the form, not after a redirect: the secret is shown this once.
    render_installation(&app, &headers, ctx, Some(shown_once)).await
}
