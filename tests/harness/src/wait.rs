//! Bounded waits on a condition of one object, fed by a watch.

use std::fmt::Debug;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::runtime::wait::await_condition;
use kube::{Api, Resource};

/// A generous bound for things that happen within a second on a healthy server.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Waits until `cond` holds for the object `name` (`None`: it does not
/// exist), for at most `timeout`, and returns the object. On a timeout the
/// error shows the object as it is then.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    cond: impl Fn(Option<&K>) -> bool,
) -> Result<Option<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, cond)).await {
        Ok(result) => result.with_context(|| format!("watching {name} for: {what}")),
        Err(_) => {
            let now = match api.get_opt(name).await {
                Ok(Some(object)) => format!("{object:?}"),
                Ok(None) => "absent".into(),
                Err(error) => format!("unreadable ({error})"),
            };
            bail!("{name}: not {what} after {timeout:?}; it is now: {now}")
        }
    }
}
