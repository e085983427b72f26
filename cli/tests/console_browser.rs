//! The web console in a real browser: headless Chromium driven over
//! WebDriver (`fantoccini` to Debian's `chromedriver`) against the real
//! `a2-store console` binary serving a SQLite file that the test writes to
//! as well (two openers of one file).
//!
//! These tests need `chromium` and `chromium-driver` (`.ci/run` installs
//! them). Without `chromedriver` on PATH they FAIL saying so, unless
//! `A2_SKIP_BROWSER=1` asks to skip them. With `A2_CONSOLE_SCREENSHOTS=1`
//! the overview and session tests write the README's screenshots to
//! `docs/console/`.
//!
//! One browser runs at a time (the tests take a shared lock), so timing
//! checks (a live event within a second) are not disturbed by another
//! browser starting on the same two cores.

#[path = "fixture/console.rs"]
mod console;

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::prelude::*;
use a2_store::{ConsumerDeclaration, FailOutcome, FailRequest};
use console::Console;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use tempfile::TempDir;

/// One browser at a time.
static BROWSER_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a page element may take to show.
const ELEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the issue allows between an append and its row on the page.
const LIVE_WITHIN: Duration = Duration::from_secs(1);

/// The token of the token-file scenario.
const TOKEN: &str = "a2-browser-test-token-0123456789abcdef";

/// `chromedriver` on PATH, or `None` when `A2_SKIP_BROWSER=1` asks to skip
/// without it. Panics (fails the test) when it is missing otherwise.
fn chromedriver() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("chromedriver"))
            .find(|candidate| candidate.is_file())
    });
    if found.is_some() {
        return found;
    }
    if std::env::var("A2_SKIP_BROWSER").as_deref() == Ok("1") {
        eprintln!("console_browser: SKIPPED (A2_SKIP_BROWSER=1): the browser tests did not run");
        return None;
    }
    panic!(
        "chromedriver not found on PATH: the browser tests need Chromium and its WebDriver; install them with \
         `apt-get install chromium chromium-driver` (.ci/run does), or set A2_SKIP_BROWSER=1 to skip these tests explicitly"
    );
}

/// A free loopback port (released again: chromedriver binds it next).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

/// A chromedriver process and a headless Chromium session on it. Dropping
/// it ends the session (closing Chromium) and stops chromedriver.
struct Browser {
    client: Client,
    driver: Child,
    port: u16,
    session: Option<String>,
}

impl Browser {
    async fn start(driver: PathBuf) -> Browser {
        let port = free_port();
        let mut child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver.display()));
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("chromedriver exited at start ({status}): is chromium installed (apt-get install chromium)?");
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on port {port} within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({"args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-dev-shm-usage",
                "--disable-gpu",
                "--window-size=1280,860",
                "--hide-scrollbars",
            ]}),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| {
                let _ = child.kill();
                panic!("cannot open a Chromium session through chromedriver: {e} (is chromium installed?)")
            });
        let session = client.session_id().await.ok().flatten();
        Browser {
            client,
            driver: child,
            port,
            session,
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the WebDriver session (chromedriver closes Chromium), even
        // when the test panicked, then stops chromedriver.
        if let Some(session) = self.session.take() {
            let _ = console::http(
                &format!("http://127.0.0.1:{}", self.port),
                "DELETE",
                &format!("/session/{session}"),
                &[],
                "",
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A SQLite store in a temporary directory, open in this process, served
/// by a console process, and a browser.
struct Harness {
    store: Arc<dyn Store>,
    console: Console,
    browser: Browser,
    _dir: TempDir,
    _lock: tokio::sync::MutexGuard<'static, ()>,
}

impl Harness {
    /// The seeded store served by `a2-store console URL ARGS...`, or `None`
    /// when the browser tests are skipped.
    async fn start(args: &[&str]) -> Option<Harness> {
        let driver = chromedriver()?;
        let lock = BROWSER_LOCK.lock().await;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite:{}", dir.path().join("console.db").display());
        let store = a2_store::open(&url, OpenOptions::default())
            .await
            .expect("open the test store");
        seed(store.as_ref()).await;
        let console = Console::start(&url, args);
        let browser = Browser::start(driver).await;
        Some(Harness {
            store,
            console,
            browser,
            _dir: dir,
            _lock: lock,
        })
    }

    fn client(&self) -> &Client {
        &self.browser.client
    }

    async fn goto(&self, path: &str) {
        let url = self.console.url(path);
        self.client()
            .goto(&url)
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Waits for the element `css` matches.
    async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        match self
            .client()
            .wait()
            .at_most(ELEMENT_TIMEOUT)
            .every(Duration::from_millis(25))
            .for_element(Locator::Css(css))
            .await
        {
            Ok(element) => element,
            Err(error) => {
                let source = self.client().source().await.unwrap_or_default();
                panic!(
                    "no element '{css}' within {ELEMENT_TIMEOUT:?} ({error}); the page:\n{source}"
                )
            }
        }
    }

    /// The elements `css` matches now.
    async fn all(&self, css: &str) -> Vec<fantoccini::elements::Element> {
        self.client()
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("find '{css}': {e}"))
    }

    /// The page's visible text.
    async fn text(&self) -> String {
        self.wait_for("body")
            .await
            .text()
            .await
            .expect("the page text")
    }

    /// Writes a screenshot of the page to `docs/console/NAME` when
    /// `A2_CONSOLE_SCREENSHOTS=1`.
    async fn screenshot(&self, name: &str) {
        if std::env::var("A2_CONSOLE_SCREENSHOTS").as_deref() != Ok("1") {
            return;
        }
        let png = self.client().screenshot().await.expect("a screenshot");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/console");
        std::fs::create_dir_all(&dir).expect("create docs/console");
        std::fs::write(dir.join(name), png).expect("write the screenshot");
        eprintln!("console_browser: wrote docs/console/{name}");
    }

    /// Closes the browser session and stops the console.
    async fn finish(self) {
        let Harness {
            mut browser,
            console,
            ..
        } = self;
        if browser.client.clone().close().await.is_ok() {
            browser.session = None;
        }
        drop(browser);
        let (status, _, stderr) = console.terminate(Duration::from_secs(10));
        assert!(status.success(), "console: {status}\n{stderr}");
    }
}

/// The session whose timeline the tests read.
const CHAT: &str = "chat-7f3a";

/// The session holding the dead letter.
const BROKEN: &str = "chat-91bc";

fn user(text: &str) -> NewEvent {
    NewEvent::new("user.message", json!({"text": text})).with_target(Target::lane("agent", "main"))
}

fn claim(session: &str, holder: &str) -> ClaimRequest {
    ClaimRequest::new(session, holder, Duration::from_secs(600))
}

/// A few conversations: `chat-7f3a` with answered messages (replies
/// caused by the agent's attempts), a tool result and one message in
/// progress; `chat-91bc` whose message was dead-lettered by `agent`; and
/// sessions with messages waiting.
async fn seed(store: &dyn Store) {
    let audit = ConsumerDeclaration::log(
        "audit",
        "audit-log",
        Some(vec!["user.message".into()]),
        true,
    );
    let declare = AppendOptions {
        consumers: Some(vec![audit]),
        ..AppendOptions::default()
    };
    store
        .append(
            CHAT,
            vec![user("Where is my order #1234?")],
            declare.clone(),
        )
        .await
        .expect("append");
    for head in store
        .claim_available(claim(CHAT, "worker-1"))
        .await
        .expect("claim")
        .into_heads()
    {
        let events = if head.consumer == "agent" {
            vec![
                NewEvent::new(
                    "tool.result",
                    json!({"tool": "lookup_order", "status": "shipped"}),
                ),
                NewEvent::new(
                    "agent.reply",
                    json!({"text": "Order #1234 shipped yesterday; it arrives on Friday."}),
                ),
            ]
        } else {
            Vec::new()
        };
        store
            .complete_attempt(CompleteRequest::for_head(&head, events))
            .await
            .expect("complete");
    }
    store
        .append(
            CHAT,
            vec![user("Can you change the delivery address?")],
            declare.clone(),
        )
        .await
        .expect("append");
    let _ = store
        .claim_available(claim(CHAT, "worker-2"))
        .await
        .expect("claim");

    store
        .append(
            BROKEN,
            vec![user("Cancel my subscription")],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    for head in store
        .claim_available(claim(BROKEN, "worker-1"))
        .await
        .expect("claim")
        .into_heads()
    {
        let failed = store
            .fail_attempt(FailRequest {
                incarnation: None,
                session_id: BROKEN.into(),
                consumer: head.consumer.clone(),
                lane: head.lane.clone(),
                index: head.event.index,
                attempt: head.dispatch.attempt_count,
                error: "tool 'billing.cancel' timed out after 30 s".into(),
                max_failures: Some(1),
                retry_after_ms: None,
            })
            .await
            .expect("fail");
        assert_eq!(failed.outcome, FailOutcome::DeadLettered);
    }
    for (session, text) in [
        ("chat-a812", "Hello!"),
        ("chat-c4d0", "What are your opening hours?"),
        ("chat-e55f", "I need a refund for order #998"),
    ] {
        store
            .append(session, vec![user(text)], AppendOptions::default())
            .await
            .expect("append");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_the_counts() {
    let Some(h) = Harness::start(&["--consumer", "agent", "--consumer", "audit"]).await else {
        return;
    };
    h.goto("/").await;
    h.wait_for("[data-testid=overview]").await;
    // `agent`: 5 sessions with work, 3 of them claimable (the waiting
    // chats), 1 busy (the leased message of chat-7f3a), 1 dead letter.
    let card = "[data-testid=consumer-counts][data-consumer=agent]";
    for (count, expected) in [
        ("count-sessions", "5"),
        ("count-claimable", "3"),
        ("count-busy", "1"),
        ("count-dead", "1"),
    ] {
        let text = h
            .wait_for(&format!("{card} [data-testid={count}]"))
            .await
            .text()
            .await
            .expect("a count");
        let shown = text.split_whitespace().next().unwrap_or_default();
        assert_eq!(shown, expected, "{count}: {text}");
    }
    h.wait_for("[data-testid=consumer-counts][data-consumer=audit]")
        .await;
    h.screenshot("overview.png").await;
    h.goto("/sessions").await;
    h.wait_for("[data-testid=session-row]").await;
    let rows = h.all("[data-testid=session-row]").await;
    let mut sessions = Vec::new();
    for row in &rows {
        sessions.push(
            row.attr("data-session")
                .await
                .expect("attr")
                .unwrap_or_default(),
        );
    }
    for expected in [CHAT, BROKEN, "chat-a812", "chat-c4d0", "chat-e55f"] {
        assert!(
            sessions.iter().any(|s| s == expected),
            "{expected} not in {sessions:?}"
        );
    }
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_shows_its_events() {
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    h.goto(&format!("/sessions/{CHAT}")).await;
    h.wait_for("[data-testid=timeline]").await;
    let events = h.all("[data-testid=timeline] [data-testid=event]").await;
    let mut indexes = Vec::new();
    for event in &events {
        indexes.push(
            event
                .attr("data-index")
                .await
                .expect("attr")
                .unwrap_or_default(),
        );
    }
    let stored = h
        .store
        .read(CHAT, ReadOptions::default())
        .await
        .expect("read");
    let expected: Vec<String> = stored.iter().map(|e| e.index.to_string()).collect();
    assert_eq!(
        indexes, expected,
        "the timeline shows every event, in order"
    );
    let text = h.text().await;
    for shown in ["user.message", "agent.reply", "tool.result"] {
        assert!(text.contains(shown), "{shown} not on the page:\n{text}");
    }
    h.screenshot("session.png").await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_appended_event_appears_live_within_a_second() {
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    h.goto(&format!("/sessions/{CHAT}")).await;
    h.wait_for("[data-testid=timeline]").await;
    let before = h
        .all("[data-testid=timeline] [data-testid=event]")
        .await
        .len();
    // Give the page's live stream a moment to connect: what is measured is
    // how fast an append reaches an open page.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let appended = h
        .store
        .append(
            CHAT,
            vec![user("Thanks, that was quick!")],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let index = appended.events.last().expect("the appended row").index;
    let start = Instant::now();
    let selector = format!("[data-testid=timeline] [data-testid=event][data-index=\"{index}\"]");
    loop {
        if !h.all(&selector).await.is_empty() {
            break;
        }
        if start.elapsed() > LIVE_WITHIN {
            let source = h.client().source().await.unwrap_or_default();
            panic!("event {index} not on the page {LIVE_WITHIN:?} after its append:\n{source}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = start.elapsed();
    let after = h
        .all("[data-testid=timeline] [data-testid=event]")
        .await
        .len();
    assert_eq!(after, before + 1, "exactly the new event was added");
    eprintln!(
        "console_browser: event {index} on the page {} ms after its append",
        seen.as_millis()
    );
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_redrive_is_previewed_then_clears_the_dead_letter() {
    let Some(h) = Harness::start(&["--allow-writes"]).await else {
        return;
    };
    h.goto("/dead-letters?consumer=agent").await;
    h.wait_for("[data-testid=dead-letter]").await;
    h.goto("/redrive-all?consumer=agent&action=retry").await;
    let preview = h.wait_for("[data-testid=redrive-preview]").await;
    let text = preview.text().await.expect("preview text");
    assert!(text.contains("1 heads in 1 sessions"), "{text}");
    // Nothing changed yet.
    let dead = h
        .store
        .dead_letters(BROKEN)
        .await
        .expect("list dead letters");
    assert_eq!(dead.len(), 1, "the preview changed nothing: {dead:?}");
    h.wait_for("[data-testid=redrive-confirm]")
        .await
        .click()
        .await
        .expect("click confirm");
    h.wait_for("[data-testid=flash]").await;
    h.goto(&format!("/sessions/{BROKEN}")).await;
    h.wait_for("[data-testid=timeline]").await;
    assert!(
        h.all("[data-testid=dead-letter]").await.is_empty(),
        "the dead letter is gone from the session page"
    );
    let dead = h
        .store
        .dead_letters(BROKEN)
        .await
        .expect("list dead letters");
    assert!(dead.is_empty(), "{dead:?}");
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_mode_refuses_the_redrive() {
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    h.goto("/redrive-all?consumer=agent&action=retry").await;
    h.wait_for("[data-testid=redrive-preview]").await;
    match h.all("[data-testid=redrive-confirm]").await.first() {
        Some(button) => button.click().await.expect("click confirm"),
        None => {
            // The page offers no button in read-only mode: post the same
            // form anyway, as a crafted request would.
            post_form(
                &h,
                "/redrive-all",
                &[("consumer", "agent"), ("action", "retry")],
            )
            .await
        }
    }
    h.wait_for("[data-testid=refused]").await;
    let dead = h
        .store
        .dead_letters(BROKEN)
        .await
        .expect("list dead letters");
    assert_eq!(dead.len(), 1, "nothing was redriven: {dead:?}");
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_needed_and_logging_in_opens_the_overview() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).expect("write the token file");
    let Some(h) = Harness::start(&["--token-file", tokens.to_str().expect("a UTF-8 path")]).await
    else {
        return;
    };
    h.goto("/").await;
    h.wait_for("[data-testid=unauthorized]").await;
    assert!(h.all("[data-testid=overview]").await.is_empty());
    h.goto("/login").await;
    let field = h.wait_for("form input[name=token]").await;
    field.send_keys(TOKEN).await.expect("type the token");
    h.wait_for("form button[type=submit], form input[type=submit]")
        .await
        .click()
        .await
        .expect("log in");
    h.wait_for("[data-testid=overview]").await;
    h.goto(&format!("/sessions/{CHAT}")).await;
    h.wait_for("[data-testid=timeline]").await;
    h.finish().await;
}

/// Submits a POST form to `path` with `fields` from the current page (a
/// form built by WebDriver's script, which the page's policy does not
/// govern), carrying the page's CSRF field when it has one.
async fn post_form(h: &Harness, path: &str, fields: &[(&str, &str)]) {
    let fields: Vec<serde_json::Value> = fields.iter().map(|(k, v)| json!([k, v])).collect();
    h.client()
        .execute(
            "const [action, fields] = arguments;
             const form = document.createElement('form');
             form.method = 'post';
             form.action = action;
             const csrf = document.querySelector('input[name=csrf]');
             if (csrf) fields.push(['csrf', csrf.value]);
             for (const [name, value] of fields) {
               const input = document.createElement('input');
               input.type = 'hidden'; input.name = name; input.value = value;
               form.appendChild(input);
             }
             document.body.appendChild(form);
             form.submit();",
            vec![json!(path), json!(fields)],
        )
        .await
        .expect("post the form");
}
