//! Dialling a gateway: the channel (plain gRPC for `http://`, TLS for `https://` presenting the
//! node's client certificate), enrolment when the node has no credential yet, and the
//! certificate's renewal when it is due or missing. Enrolling and renewing take a connection of
//! their own without a client certificate (the gateway allows those two without one); the session
//! then connects with the certificate.

use crate::config::ExecutorConfig;
use crate::{credential, identity};
use drover_proto as pb;
use drover_proto::executor_gateway_client::ExecutorGatewayClient;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

fn endpoint(target: &str) -> anyhow::Result<Endpoint> {
    // Keepalives notice a server that went silent (a partition, a dead host) within seconds; the
    // executor then reconnects, to it or to another replica.
    Ok(Endpoint::from_shared(target.to_owned())?
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true))
}

async fn client(endpoint: Endpoint) -> anyhow::Result<ExecutorGatewayClient<Channel>> {
    Ok(ExecutorGatewayClient::new(endpoint.connect().await?)
        .max_decoding_message_size(drover_proto::MAX_MESSAGE_BYTES))
}

/// A client of the gateway at `target` and the node's credential, enrolling first when the node
/// has none (`credential` is then set).
pub(super) async fn connect(
    config: &ExecutorConfig,
    target: &str,
    credential: &mut Option<String>,
) -> anyhow::Result<(ExecutorGatewayClient<Channel>, String)> {
    let base = endpoint(target)?;
    if !target.starts_with("https://") {
        let mut client = client(base).await?;
        let secret = match credential {
            Some(secret) => secret.clone(),
            None => credential::enroll(&mut client, config, None).await?,
        };
        *credential = Some(secret.clone());
        return Ok((client, secret));
    }
    let trust = identity::trust(&config.gateway_trust, &config.data_dir)?;
    let secret = match credential {
        Some(secret) => secret.clone(),
        None => {
            let mut client = client(identity::endpoint(base.clone(), &trust, None)?).await?;
            credential::enroll(&mut client, config, Some(&trust)).await?
        }
    };
    *credential = Some(secret.clone());
    // Enrolment keeps the authority: trusted by its certificate from now on.
    let trust = identity::trust(&config.gateway_trust, &config.data_dir)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let kept = match identity::kept(&config.data_dir)? {
        Some(pair) if !identity::due(&pair.1, now) => pair,
        _ => {
            let mut client = client(identity::endpoint(base.clone(), &trust, None)?).await?;
            if let Err(err) = renew(&mut client, config, &secret, &trust).await {
                if err
                    .downcast_ref::<tonic::Status>()
                    .is_some_and(|status| status.code() == tonic::Code::Unauthenticated)
                {
                    // Revoked, or a server that never knew it: enrol again on the next attempt.
                    credential::forget(&config.data_dir)?;
                    *credential = None;
                }
                return Err(err);
            }
            identity::kept(&config.data_dir)?
                .ok_or_else(|| anyhow::anyhow!("the renewed certificate was not kept"))?
        }
    };
    let client = client(identity::endpoint(base, &trust, Some(&kept))?).await?;
    Ok((client, secret))
}

/// How often a session checks whether the node's certificate is due for renewal.
const RENEWAL_CHECK: Duration = Duration::from_secs(30);

/// Stops the renewal task when the session ends.
#[derive(Debug)]
pub(super) struct Renewing(tokio::task::JoinHandle<()>);

impl Drop for Renewing {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// While a session over TLS lasts: renews the node's certificate over it once it is due (a third
/// of its life left), so a node connected for weeks never reconnects with an expired one.
pub(super) fn renew_while_connected(
    config: &ExecutorConfig,
    target: &str,
    client: &ExecutorGatewayClient<Channel>,
    secret: &str,
) -> Option<Renewing> {
    if !target.starts_with("https://") {
        return None;
    }
    let (config, mut client, secret) = (config.clone(), client.clone(), secret.to_owned());
    Some(Renewing(tokio::spawn(async move {
        let mut checks = tokio::time::interval(RENEWAL_CHECK);
        checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            checks.tick().await;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            let due = match identity::kept(&config.data_dir) {
                Ok(Some((_, certificate))) => identity::due(&certificate, now),
                _ => true,
            };
            if !due {
                continue;
            }
            let trust = match identity::trust(&config.gateway_trust, &config.data_dir) {
                Ok(trust) => trust,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot renew the node's certificate");
                    continue;
                }
            };
            if let Err(err) = renew(&mut client, &config, &secret, &trust).await {
                tracing::warn!(error = %err, "cannot renew the node's certificate; trying again in {RENEWAL_CHECK:?}");
            }
        }
    })))
}

/// Asks for a new client certificate with the node credential, and keeps it.
async fn renew(
    client: &mut ExecutorGatewayClient<Channel>,
    config: &ExecutorConfig,
    secret: &str,
    trust: &identity::Trust,
) -> anyhow::Result<()> {
    let mut request = tonic::Request::new(pb::RenewCertificateRequest {
        certificate_request: identity::signing_request(&config.data_dir, &config.name)?,
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {secret}")
            .parse()
            .map_err(|_| credential::Fatal("the node credential is damaged".to_owned()))?,
    );
    let response = client.renew_certificate(request).await?.into_inner();
    identity::keep_authority(trust, &response.authority, &config.data_dir)?;
    identity::keep_certificate(&config.data_dir, &response.certificate)?;
    tracing::info!(
        node.name = config.name,
        "renewed the node's client certificate"
    );
    Ok(())
}
