//! The pages as a browser without JavaScript uses them: a client that keeps its cookies and does
//! not follow redirects, and the way into an account (the mailed invitation).

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::TestHost;

/// A browser: a client that does not follow redirects and keeps the cookies it was given.
#[derive(Clone)]
pub struct Browser {
    http: reqwest::Client,
    base: String,
    cookies: std::collections::BTreeMap<String, String>,
}

/// What a page request answered.
pub struct Page {
    pub status: StatusCode,
    pub location: Option<String>,
    pub set_cookies: Vec<String>,
    pub body: String,
}

impl Page {
    /// Asserts that this is the pages' not-found page (404, as HTML), saying `what` it was
    /// when it is not.
    pub fn assert_not_found(&self, what: &str) {
        assert_eq!(self.status, StatusCode::NOT_FOUND, "{what}: {}", self.body);
        assert!(
            self.body.contains("There is no such page"),
            "{what}: {}",
            self.body
        );
    }

    /// The value of the hidden `csrf` field of the page's (first) form.
    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find(r#"name="csrf" value=""#)
            .unwrap_or_else(|| panic!("no csrf field in:\n{}", self.body));
        let rest = &self.body[at + r#"name="csrf" value=""#.len()..];
        rest[..rest.find('"').expect("closing quote")].to_owned()
    }
}

impl Browser {
    pub fn new(host: &TestHost) -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            base: host.base.clone(),
            cookies: Default::default(),
        }
    }

    pub async fn request(
        &mut self,
        method: Method,
        path: &str,
        form: Option<&[(&str, &str)]>,
    ) -> Page {
        let url = if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base)
        };
        let mut req = self.http.request(method, url);
        if !self.cookies.is_empty() {
            let header: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req = req.header("cookie", header.join("; "));
        }
        if let Some(form) = form {
            let body: String = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form)
                .finish();
            req = req
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body);
        }
        let response = req.send().await.expect("the host answers");
        let status = response.status();
        let location = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let set_cookies: Vec<String> = response
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        for cookie in &set_cookies {
            let pair = cookie.split(';').next().unwrap_or_default();
            if let Some((name, value)) = pair.split_once('=') {
                if value.is_empty() {
                    self.cookies.remove(name);
                } else {
                    self.cookies.insert(name.to_owned(), value.to_owned());
                }
            }
        }
        let body = response.text().await.unwrap_or_default();
        Page {
            status,
            location,
            set_cookies,
            body,
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        self.request(Method::GET, path, None).await
    }

    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        self.request(Method::POST, path, Some(form)).await
    }
}

/// The invitation link mailed to `email` (the operator's outbox: no SMTP server is set).
pub async fn invitation_link(host: &TestHost, email: &str) -> String {
    let mail = host
        .admin(Method::GET, "/admin/v1/mail?limit=250", None)
        .await
        .expect(200);
    let body = mail.body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["to"] == email)
        .unwrap_or_else(|| panic!("no mail to {email}: {}", mail.body))["body"]
        .as_str()
        .expect("a body")
        .to_owned();
    let at = body.find("http").expect("a link in the mail");
    body[at..]
        .split_whitespace()
        .next()
        .expect("the link")
        .to_owned()
}

/// Invites `email` as the owner of `store`, accepts with `password` and signs in.
pub async fn owner_signed_in(host: &TestHost, store: &str, email: &str, password: &str) -> Browser {
    host.admin(
        Method::POST,
        &format!("/admin/v1/stores/{store}/invitations"),
        Some(json!({"email": email})),
    )
    .await
    .expect(201);
    accept_and_sign_in(host, email, password).await
}

/// Invites `email` as a developer, accepts with `password` and signs in.
pub async fn developer_signed_in(host: &TestHost, email: &str, password: &str) -> Browser {
    host.admin(
        Method::POST,
        "/admin/v1/developer-invitations",
        Some(json!({"email": email})),
    )
    .await
    .expect(201);
    accept_and_sign_in(host, email, password).await
}

/// Follows the invitation mailed to `email`, sets `password` and signs in.
pub async fn accept_and_sign_in(host: &TestHost, email: &str, password: &str) -> Browser {
    let link = invitation_link(host, email).await;
    let mut browser = Browser::new(host);
    let form = browser.get(&link).await;
    let csrf = form.csrf();
    let done = browser
        .post(
            &link,
            &[
                ("csrf", &csrf),
                ("password", password),
                ("confirm", password),
            ],
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    let signed = browser
        .post(
            "/sign-in",
            &[("csrf", &csrf), ("email", email), ("password", password)],
        )
        .await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    browser
}

/// Makes an API key named `name` in the console; returns the secret shown once.
pub async fn make_key(dev: &mut Browser, name: &str) -> String {
    let console = dev.get("/developer").await;
    assert_eq!(console.status, StatusCode::OK, "{}", console.body);
    let made = dev
        .post(
            "/developer/keys",
            &[("csrf", &console.csrf()), ("name", name)],
        )
        .await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.body);
    let marker = "<code class=\"token\">";
    let at = made.body.find(marker).expect("the new key") + marker.len();
    let secret = made.body[at..at + made.body[at..].find('<').expect("end")].to_owned();
    assert!(secret.starts_with("chk_"), "{secret}");
    assert!(made.body.contains("shown only this once"), "{}", made.body);
    assert!(
        !dev.get("/developer").await.body.contains(&secret),
        "the secret is shown once"
    );
    secret
}
