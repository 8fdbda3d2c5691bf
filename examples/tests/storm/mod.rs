//! A storm of HTTP clients against the axum_likes service, some of them cut off after a few
//! milliseconds (their request's future dropped, as a client timeout does): shared by the web
//! test (`examples/tests/web.rs`) and the cancellation probe (`examples/examples/cancellation.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use slotted_examples::web::Likes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the storm sends.
#[derive(Debug, Clone)]
pub struct Storm {
    /// Clients at once, each with its own HTTP connection.
    pub clients: usize,
    /// Requests each client sends, one after the other.
    pub requests: usize,
    /// One request in `cut_every` is cut off (0: none).
    pub cut_every: usize,
    /// A cut-off request is dropped after this many milliseconds, spread over the range.
    pub cut_after_ms: (u64, u64),
    /// The posts, which exist before the storm.
    pub posts: Vec<i32>,
}

/// What came back.
#[derive(Debug, Default)]
pub struct Report {
    /// Requests answered 200 with a right body.
    pub ok: usize,
    /// Requests cut off before their answer.
    pub cut_off: usize,
    /// Answers other than 200, by status.
    pub statuses: BTreeMap<u16, usize>,
    /// Answers 200 whose body is wrong (another post's id, more likes than were sent), and
    /// bodies that could not be read: the first few, described.
    pub wrong: Vec<String>,
    /// How many wrong answers in all.
    pub wrong_count: usize,
    /// Likes answered 200, per post.
    pub acknowledged: HashMap<i32, i64>,
    /// Likes cut off, per post: each counted once or not at all.
    pub cut_off_likes: HashMap<i32, i64>,
    /// How long the storm took.
    pub elapsed: Duration,
    /// Requests sent.
    pub sent: usize,
}

impl Report {
    /// Answers that are neither 200 and right nor cut off.
    pub fn failures(&self) -> usize {
        self.statuses.values().sum::<usize>() + self.wrong_count
    }

    /// Requests per second, cut-off ones included.
    pub fn rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64()
    }

    fn wrong(&mut self, what: String) {
        self.wrong_count += 1;
        if self.wrong.len() < 5 {
            self.wrong.push(what);
        }
    }
}

/// Runs the storm against the service at `base` (`http://127.0.0.1:PORT`). Nothing else may
/// like its posts meanwhile.
///
/// The likes already counted before it are read first, as the bound of the totals it sees.
pub async fn run(base: &str, storm: &Storm) -> Report {
    let mut before = HashMap::new();
    for &post in &storm.posts {
        before.insert(
            post,
            AtomicI64::new(settled_total(base, post).await.unwrap_or(0)),
        );
    }
    let sent_likes: Arc<HashMap<i32, AtomicI64>> = Arc::new(before);
    let report = Arc::new(Mutex::new(Report::default()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..storm.clients)
        .map(|client| {
            let (base, storm) = (base.to_owned(), storm.clone());
            let (sent_likes, report) = (sent_likes.clone(), report.clone());
            tokio::spawn(async move {
                let addr = base.trim_start_matches("http://").to_owned();
                for r in 0..storm.requests {
                    let n = client * storm.requests + r;
                    let post = storm.posts[(client + r) % storm.posts.len()];
                    let cut = storm.cut_every > 0 && n % storm.cut_every == 0;
                    let (lo, hi) = storm.cut_after_ms;
                    let limit = Duration::from_millis(lo + (n as u64 * 7919) % (hi - lo + 1));
                    let kind = n % 5;
                    let request = match kind {
                        0..=2 => format!("POST /posts/{post}/like"),
                        3 => format!("GET /posts/{post}/likes"),
                        _ => format!("GET /likes?ids={post},999999"),
                    };
                    if kind <= 2 {
                        sent_likes[&post].fetch_add(1, Ordering::SeqCst);
                    }
                    let answer = if cut {
                        tokio::time::timeout(limit, send(&addr, &request))
                            .await
                            .unwrap_or(Err(Cut))
                    } else {
                        send(&addr, &request).await
                    };
                    let sent_now = sent_likes[&post].load(Ordering::SeqCst);
                    let mut report = report.lock().unwrap();
                    report.sent += 1;
                    let (status, body) = match answer {
                        Ok(answer) => answer,
                        Err(Cut) => {
                            report.cut_off += 1;
                            if kind <= 2 {
                                *report.cut_off_likes.entry(post).or_default() += 1;
                            }
                            continue;
                        }
                    };
                    if status != StatusCode::OK {
                        *report.statuses.entry(status.as_u16()).or_default() += 1;
                        continue;
                    }
                    let right = if kind <= 3 {
                        match serde_json::from_str::<Likes>(&body) {
                            Ok(l) => {
                                l.id == post && l.likes <= sent_now && (kind == 3 || l.likes >= 1)
                            }
                            Err(_) => false,
                        }
                    } else {
                        match serde_json::from_str::<HashMap<String, i64>>(&body) {
                            Ok(m) => {
                                m.len() == 2
                                    && m.get("999999") == Some(&0)
                                    && m.get(&post.to_string()).is_some_and(|&l| l <= sent_now)
                            }
                            Err(_) => false,
                        }
                    };
                    if right {
                        report.ok += 1;
                        if kind <= 2 {
                            *report.acknowledged.entry(post).or_default() += 1;
                        }
                    } else {
                        report.wrong(format!("post {post}, request {n}: {body}"));
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a storm client");
    }
    let mut report = std::mem::take(&mut *report.lock().unwrap());
    report.elapsed = started.elapsed();
    report
}

/// A request cut off: its connection dropped before the answer came.
struct Cut;

/// One request on a connection of its own (`Connection: close`), as a client that hangs up
/// has it: dropping this future closes the connection, and the server sees the client gone.
async fn send(addr: &str, request: &str) -> Result<(StatusCode, String), Cut> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the service");
    let head = format!(
        "{request} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(head.as_bytes())
        .await
        .expect("send a request");
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .expect("read the answer");
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"));
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((status, body.to_owned()))
}

/// After the storm: `n` requests, none cut off, each of whose answers must be 200 and right;
/// the failures, described.
pub async fn fresh_requests(base: &str, posts: &[i32], n: usize) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut failures = Vec::new();
    for i in 0..n {
        let post = posts[i % posts.len()];
        let url = format!("{base}/posts/{post}/likes");
        match http.get(&url).send().await {
            Ok(r) if r.status() == StatusCode::OK => match r.json::<Likes>().await {
                Ok(l) if l.id == post => {}
                other => failures.push(format!("GET {url}: {other:?}")),
            },
            other => failures.push(format!("GET {url}: {other:?}")),
        }
    }
    failures
}

/// A post's total over HTTP, read until it stops moving (a cut-off request's database work
/// may still be finishing); `None` when 20 reads in a row fail.
pub async fn settled_total(base: &str, post: i32) -> Option<i64> {
    let http = reqwest::Client::new();
    let read = || async {
        for _ in 0..20 {
            let response = http.get(format!("{base}/posts/{post}/likes")).send().await;
            if let Ok(response) = response {
                if let Ok(likes) = response.json::<Likes>().await {
                    if likes.id == post {
                        return Some(likes.likes);
                    }
                }
            }
        }
        None
    };
    let mut total = read().await?;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let again = read().await?;
        if again == total {
            return Some(total);
        }
        total = again;
    }
}
