//! The client side of the durability run (`drover-loadgen durability`, driven by
//! `scripts/durability-run`, which kills the server and restarts Postgres under it).
//!
//! It owns the logical submissions and their retries: submission `i` (labels `durability: <run>`,
//! `submission: s<i>`) is submitted by client `i % clients` until the server acknowledges it, whatever
//! happens to the server in between. Even-numbered clients send an `Idempotency-Key`
//! (`durability-<run>-<i>`) and let the server choose the name (`generateName: dur-`): 201 is created,
//! 200 an idempotent replay. Odd-numbered clients send no key but a fixed name (`dur-<run>-<i>`), so a
//! 409 on `metadata.name` may be their own earlier attempt whose answer was lost: that is acknowledged
//! by conflict, with the id of the job holding the name (looked up by name and labels). A connection
//! error, a timeout (10 s), a 5xx or a 429 is retried with the same key or name after a pause of 100 ms
//! growing to 2 s, for as long as it takes; any other answer is a rejection, reported and not retried.
//!
//! Every acknowledgement is one line of `--out`, written as it comes: `i<TAB>job id<TAB>status` (201,
//! 200 or 409), so the script can follow the run by the file's length and then check each line against
//! the database.

use anyhow::{Context, bail};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A request (connect, send, answer) given up after this long, then retried.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The first pause before a retry; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// What `drover-loadgen durability` was asked to do.
#[derive(Debug)]
pub struct Settings {
    pub server: String,
    pub token: String,
    pub clients: usize,
    pub total: usize,
    pub out: PathBuf,
    /// Tells this run's jobs, keys and names from any other run's.
    pub run: String,
}

/// How the server acknowledged a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ack {
    /// 201: stored now.
    Created,
    /// 200: the idempotency key's first job, stored by an earlier attempt.
    Replayed,
    /// 409 on the fixed name: a job of that name (and this submission's labels) exists.
    Conflict,
}

impl Ack {
    fn status(self) -> u16 {
        match self {
            Ack::Created => 201,
            Ack::Replayed => 200,
            Ack::Conflict => 409,
        }
    }
}

/// The outcome of one attempt.
enum Attempt {
    Acked(Ack, String),
    /// Worth trying again (the server or its database away, or busy); the reason, for the progress line.
    Retry(String),
    /// An answer retrying cannot change.
    Rejected(String),
}

/// Counters shared by the clients and the progress line.
#[derive(Default)]
struct Tally {
    acked: AtomicUsize,
    by_status: [AtomicUsize; 3],
    retries: AtomicU64,
    rejected: AtomicUsize,
    last_retry: Mutex<String>,
}

struct Client {
    http: reqwest::Client,
    jobs_url: String,
    authorization: String,
    run: String,
    out: Mutex<std::fs::File>,
    tally: Tally,
}

pub async fn run(settings: Settings) -> anyhow::Result<()> {
    if settings.run.is_empty()
        || settings.run.len() > 20
        || !settings
            .run
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        bail!("--run must be 1 to 20 lowercase letters and digits (it goes into job names)");
    }
    if settings.clients == 0 {
        bail!("--clients must be at least 1");
    }
    let out = std::fs::File::create(&settings.out)
        .with_context(|| format!("cannot create {}", settings.out.display()))?;
    let http = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(settings.clients)
        .build()?;
    let client = Arc::new(Client {
        http,
        jobs_url: format!("{}/api/v1/jobs", settings.server.trim_end_matches('/')),
        authorization: format!("Bearer {}", settings.token),
        run: settings.run.clone(),
        out: Mutex::new(out),
        tally: Tally::default(),
    });
    let started = Instant::now();
    let progress = {
        let client = client.clone();
        let total = settings.total;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let tally = &client.tally;
                let retries = tally.retries.load(Ordering::Relaxed);
                let last = tally.last_retry.lock().expect("tally lock").clone();
                eprintln!(
                    "durability: {}/{total} acknowledged after {:.0}s, {retries} retries{}",
                    tally.acked.load(Ordering::Relaxed),
                    started.elapsed().as_secs_f64(),
                    if last.is_empty() {
                        String::new()
                    } else {
                        format!(" (last: {last})")
                    },
                );
            }
        })
    };
    let mut tasks = Vec::with_capacity(settings.clients);
    for number in 0..settings.clients {
        let client = client.clone();
        let (clients, total) = (settings.clients, settings.total);
        tasks.push(tokio::spawn(async move {
            for i in (number..total).step_by(clients) {
                client.submit_until_acked(i, number % 2 == 0).await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    progress.abort();
    let tally = &client.tally;
    let count = |ack: Ack| tally.by_status[ack as usize].load(Ordering::Relaxed);
    let rejected = tally.rejected.load(Ordering::Relaxed);
    eprintln!(
        "durability: {} of {} submissions acknowledged ({} created, {} replayed, {} by conflict), {rejected} rejected, {} retries, in {:.1}s with {} clients",
        tally.acked.load(Ordering::Relaxed),
        settings.total,
        count(Ack::Created),
        count(Ack::Replayed),
        count(Ack::Conflict),
        tally.retries.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
        settings.clients,
    );
    if rejected > 0 {
        bail!("{rejected} submissions were rejected (see above)");
    }
    Ok(())
}

impl Client {
    /// Submits logical submission `i` until it is acknowledged or rejected; records either.
    async fn submit_until_acked(&self, i: usize, keyed: bool) -> anyhow::Result<()> {
        let mut pause = FIRST_PAUSE;
        loop {
            match self.attempt(i, keyed).await {
                Attempt::Acked(ack, job_id) => {
                    let line = format!("{i}\t{job_id}\t{}\n", ack.status());
                    // One write per line, straight to the file: the script counts lines as they come.
                    self.out
                        .lock()
                        .expect("out lock")
                        .write_all(line.as_bytes())
                        .context("cannot write --out")?;
                    self.tally.by_status[ack as usize].fetch_add(1, Ordering::Relaxed);
                    self.tally.acked.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Attempt::Retry(reason) => {
                    self.tally.retries.fetch_add(1, Ordering::Relaxed);
                    *self.tally.last_retry.lock().expect("tally lock") = reason;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Attempt::Rejected(reason) => {
                    eprintln!("durability: submission {i} rejected: {reason}");
                    self.tally.rejected.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
            }
        }
    }

    async fn attempt(&self, i: usize, keyed: bool) -> Attempt {
        let run = &self.run;
        let mut request = self
            .http
            .post(&self.jobs_url)
            .header("authorization", &self.authorization)
            .header("content-type", "application/json");
        let metadata = if keyed {
            request = request.header("idempotency-key", format!("durability-{run}-{i}"));
            r#""generateName":"dur-""#.to_owned()
        } else {
            format!(r#""name":"dur-{run}-{i}""#)
        };
        let body = job_body(&metadata, run, i);
        let response = match request.body(body).send().await {
            Ok(response) => response,
            Err(err) => return Attempt::Retry(describe(&err)),
        };
        let status = response.status();
        let text = match response.text().await {
            Ok(text) => text,
            Err(err) => return Attempt::Retry(format!("{status}, body lost: {}", describe(&err))),
        };
        match status.as_u16() {
            201 | 200 => match job_id(&text) {
                Some(id) => {
                    let ack = if status.as_u16() == 201 {
                        Ack::Created
                    } else {
                        Ack::Replayed
                    };
                    Attempt::Acked(ack, id)
                }
                None => Attempt::Rejected(format!("{status} without a job id: {text}")),
            },
            409 if !keyed => self.holder_of_name(i).await,
            429 | 500..=599 => Attempt::Retry(format!("{status}: {}", first_line(&text))),
            _ => Attempt::Rejected(format!("{status}: {text}")),
        }
    }

    /// After a 409 on submission `i`'s fixed name: the job holding the name, which must carry the
    /// submission's labels (else the conflict is with someone else's job, a rejection).
    async fn holder_of_name(&self, i: usize) -> Attempt {
        let run = &self.run;
        let name = format!("dur-{run}-{i}");
        let response = self
            .http
            .get(&self.jobs_url)
            .header("authorization", &self.authorization)
            .query(&[
                ("name", name.as_str()),
                ("label", &format!("durability={run},submission=s{i}")),
                ("limit", "500"),
            ])
            .send()
            .await;
        let response = match response {
            Ok(response) => response,
            Err(err) => return Attempt::Retry(format!("409, look-up: {}", describe(&err))),
        };
        let status = response.status();
        let text = match response.text().await {
            Ok(text) => text,
            Err(err) => {
                return Attempt::Retry(format!("409, look-up body lost: {}", describe(&err)));
            }
        };
        if status.as_u16() == 429 || status.is_server_error() {
            return Attempt::Retry(format!("409, look-up {status}: {}", first_line(&text)));
        }
        if !status.is_success() {
            return Attempt::Rejected(format!("409, then the look-up answered {status}: {text}"));
        }
        let list: serde_json::Value = match serde_json::from_str(&text) {
            Ok(list) => list,
            Err(err) => return Attempt::Rejected(format!("409, look-up not JSON ({err}): {text}")),
        };
        let holder = list["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|job| job["name"] == name.as_str())
            .and_then(|job| job["id"].as_str());
        match holder {
            Some(id) => Attempt::Acked(Ack::Conflict, id.to_owned()),
            None => Attempt::Rejected(format!(
                "409 on `{name}`, but no job of that name carries this submission's labels"
            )),
        }
    }
}

/// The job every durability submission sends (a `sleep 1` command on no GPUs, as `run`'s), with its
/// `metadata` name or generateName member, and the run's and the submission's labels.
fn job_body(name_member: &str, run: &str, i: usize) -> String {
    format!(
        r#"{{"apiVersion":"drover.dev/v1","kind":"DroverJob","metadata":{{{name_member},"labels":{{"bench":"durability","durability":"{run}","submission":"s{i}"}}}},"spec":{{"type":"command","command":{{"argv":["sleep","1"]}},"resources":{{"workers":{{"min":1,"max":1}},"gpus_per_worker":0,"cpus_per_worker":1}}}}}}"#
    )
}

fn job_id(text: &str) -> Option<String> {
    let envelope: serde_json::Value = serde_json::from_str(text).ok()?;
    envelope["job"]["id"].as_str().map(str::to_owned)
}

/// A short reason for a failed request: what reqwest says, with the cause it wraps.
fn describe(err: &reqwest::Error) -> String {
    let kind = if err.is_timeout() {
        "timeout"
    } else if err.is_connect() {
        "connect"
    } else {
        "request"
    };
    let mut text = format!("{kind}: {err}");
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(160)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_json_with_the_submissions_labels() {
        for (member, keyed) in [
            (r#""generateName":"dur-""#, true),
            (r#""name":"dur-r1-7""#, false),
        ] {
            let body: serde_json::Value =
                serde_json::from_str(&job_body(member, "r1", 7)).expect("JSON");
            assert_eq!(body["metadata"]["labels"]["submission"], "s7");
            assert_eq!(body["metadata"]["labels"]["durability"], "r1");
            assert_eq!(body["metadata"]["generateName"].is_string(), keyed);
        }
    }

    #[test]
    fn acks_record_their_status() {
        assert_eq!(
            [Ack::Created, Ack::Replayed, Ack::Conflict].map(Ack::status),
            [201, 200, 409]
        );
        assert_eq!(
            job_id(r#"{"job":{"id":"0190-x","name":"a"}}"#).as_deref(),
            Some("0190-x")
        );
        assert_eq!(job_id("not json"), None);
    }
}
