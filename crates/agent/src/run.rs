//! The agent's loop: read the source, convert, publish — on every interval
//! and at once when the source signals a health event or a change.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::time::MissedTickBehavior;

use super::convert::{self, Context};
use super::health::{Faults, HealthRules};
use super::publish::StatusPublisher;
use super::source::{GpuSource, Reading, Signal};
use crate::error::Error;
use wasmgpu_api::GPUNodeStatus;

/// One node's GPUs as the agent knows them: the source, the health rules and
/// the faults seen so far.
pub struct Agent {
    source: Box<dyn GpuSource>,
    rules: HealthRules,
    faults: Faults,
    last_good: Option<Reading>,
    statuses: Option<watch::Sender<Option<GPUNodeStatus>>>,
}

impl Agent {
    /// An agent reading `source`, judging events by `rules`.
    pub fn new(source: Box<dyn GpuSource>, rules: HealthRules) -> Self {
        Self {
            source,
            rules,
            faults: Faults::default(),
            last_good: None,
            statuses: None,
        }
    }

    /// Also sends every status the loop reads to `statuses` (the device
    /// plugin advertises the GPUs from it).
    pub fn report_to(&mut self, statuses: watch::Sender<Option<GPUNodeStatus>>) {
        self.statuses = Some(statuses);
    }

    /// Reads the source and returns the reading and its status; a failed read
    /// shows the last good one with `Ready` false, or is an error when there
    /// is none.
    pub fn snapshot(&mut self) -> Result<(Reading, GPUNodeStatus), Error> {
        let read_error = match self.source.read() {
            Ok(reading) => {
                self.last_good = Some(reading);
                None
            }
            Err(error) => match self.last_good {
                Some(_) => {
                    tracing::warn!(source = %self.source.describe(), kind = error.kind(), %error, "Read failed");
                    Some(error.to_string())
                }
                None => return Err(Error::Source(error)),
            },
        };
        let reading = self.last_good.clone().unwrap_or_default();
        let source = self.source.describe();
        let status = convert::to_status(
            &reading,
            Context {
                source: &source,
                read_error: read_error.as_deref(),
                rules: &self.rules,
                faults: &self.faults,
                now: Timestamp::now(),
            },
        );
        Ok((reading, status))
    }

    /// Publishes through `publisher` every `interval`, and at once on a
    /// health event or a changed source, until SIGTERM or Ctrl-C.
    pub async fn run(
        mut self,
        mut publisher: StatusPublisher,
        interval: Duration,
    ) -> Result<(), Error> {
        let (signals, mut received) = mpsc::unbounded_channel();
        self.source.watch(signals).map_err(Error::Source)?;
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(Error::Signal)?;
        tracing::info!(
            source = %self.source.describe(),
            interval = ?interval,
            ignored_xids = ?self.rules.ignored_xids().collect::<Vec<_>>(),
            "Agent started"
        );
        let mut first = true;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                Some(signal) = received.recv() => match signal {
                    Signal::Health(event) => {
                        let uuid = event.uuid.clone();
                        let kind = event.kind;
                        if self.faults.record(&self.rules, event) {
                            tracing::warn!(%uuid, ?kind, "GPU unhealthy");
                        } else {
                            tracing::info!(%uuid, ?kind, "Event does not change health");
                            continue;
                        }
                    }
                    Signal::Changed => tracing::info!(source = %self.source.describe(), "Source changed"),
                },
                _ = tokio::signal::ctrl_c() => break,
                _ = terminate.recv() => break,
            }
            match self.snapshot() {
                Ok((_, status)) => {
                    if let Some(statuses) = &self.statuses {
                        statuses.send_replace(Some(status.clone()));
                    }
                    match publisher.publish(status).await {
                        Ok(false) if first => tracing::info!("GPUNode status already current"),
                        Ok(_) => {}
                        Err(error) => {
                            tracing::warn!(kind = error.kind(), %error, "Publishing failed; retrying on the next interval");
                        }
                    }
                    first = false;
                }
                Err(error) => tracing::warn!(%error, "No GPUs to publish yet"),
            }
        }
        tracing::info!("Agent stopped");
        Ok(())
    }
}
