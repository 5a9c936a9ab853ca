//! A tiny SMTP server on 127.0.0.1:0 that accepts every message: enough of RFC 5321 (EHLO/HELO,
//! MAIL, RCPT, DATA, RSET, NOOP, QUIT) for the host's mailer to hold a real SMTP conversation.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// A message as the server received it.
#[derive(Debug, Clone, Default)]
pub struct ReceivedMail {
    /// The envelope sender (`MAIL FROM`).
    pub from: String,
    /// The envelope recipients (`RCPT TO`).
    pub to: Vec<String>,
    /// The message: headers and body, dot-unstuffed.
    pub data: String,
}

/// The server; stops when dropped.
pub struct SmtpServer {
    /// `smtp://127.0.0.1:PORT`, as `COMMERCE_HOST_SMTP_URL` takes it.
    pub url: String,
    mails: Arc<Mutex<Vec<ReceivedMail>>>,
    task: tokio::task::JoinHandle<()>,
}

impl SmtpServer {
    /// Starts the server.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind smtp");
        let url = format!("smtp://{}", listener.local_addr().expect("addr"));
        let mails = Arc::new(Mutex::new(Vec::new()));
        let store = mails.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let store = store.clone();
                tokio::spawn(async move {
                    let _ = converse(socket, store).await;
                });
            }
        });
        Self { url, mails, task }
    }

    /// Waits for `n` messages; panics after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<ReceivedMail> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.mails.lock().expect("lock").clone();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "got {} mails, expected {n}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn converse(
    socket: tokio::net::TcpStream,
    store: Arc<Mutex<Vec<ReceivedMail>>>,
) -> std::io::Result<()> {
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read);
    write.write_all(b"220 test-smtp ESMTP ready\r\n").await?;
    let mut mail = ReceivedMail::default();
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let command = line.trim_end().to_owned();
        let verb = command
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        let reply: &[u8] = match verb.as_str() {
            "EHLO" => b"250-test-smtp greets you\r\n250 8BITMIME\r\n",
            "HELO" | "NOOP" => b"250 ok\r\n",
            "RSET" => {
                mail = ReceivedMail::default();
                b"250 ok\r\n"
            }
            "MAIL" => {
                mail.from = address(&command);
                b"250 ok\r\n"
            }
            "RCPT" => {
                mail.to.push(address(&command));
                b"250 ok\r\n"
            }
            "DATA" => {
                write.write_all(b"354 end with <CRLF>.<CRLF>\r\n").await?;
                let mut data = String::new();
                loop {
                    line.clear();
                    if lines.read_line(&mut line).await? == 0 {
                        return Ok(());
                    }
                    if line == ".\r\n" || line == ".\n" {
                        break;
                    }
                    let unstuffed = line.strip_prefix('.').unwrap_or(&line);
                    data.push_str(unstuffed);
                }
                mail.data = data;
                store.lock().expect("lock").push(std::mem::take(&mut mail));
                b"250 queued\r\n"
            }
            "QUIT" => {
                write.write_all(b"221 bye\r\n").await?;
                return Ok(());
            }
            _ => b"502 not implemented\r\n",
        };
        write.write_all(reply).await?;
    }
}

fn address(command: &str) -> String {
    command
        .split_once('<')
        .and_then(|(_, rest)| rest.split_once('>'))
        .map(|(addr, _)| addr.to_owned())
        .unwrap_or_default()
}
