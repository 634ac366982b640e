//! The policy's parameters (`config.json`): tenants, their quotas, limits
//! and weights.

use serde::Deserialize;
use wasmgpu_policy_sdk::{glob_match, parse_config};

/// `config.json`, all fields optional.
///
/// ```json
/// {"tenants": [{"name": "team-a", "namespaces": ["team-a", "team-a-*"],
///               "quota": 40, "limit": 48, "weight": 1}],
///  "defaultWeight": 1, "preferNvlink": true, "reclaim": true}
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Config {
    /// Named groups of namespaces; a namespace no tenant matches is a tenant
    /// of its own, with `default_weight` and neither quota nor limit.
    pub tenants: Vec<TenantConfig>,
    /// The weight of the namespaces no tenant matches.
    pub default_weight: f64,
    /// Keep multi-GPU exclusive requests on GPUs joined by NVLink when possible.
    pub prefer_nvlink: bool,
    /// A tenant under its quota whose pod fits nowhere evicts pods of
    /// tenants over theirs (GPUTenant objects only), never taking one
    /// below its quota.
    pub reclaim: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            tenants: Vec::new(),
            default_weight: 1.0,
            prefer_nvlink: true,
            reclaim: true,
        }
    }
}

/// One tenant of `config.json`'s `tenants`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantConfig {
    /// The tenant's name, shown in wait reasons.
    pub name: String,
    /// Namespace globs (`*`, `?`); none given: the namespace named `name`.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// GPUs guaranteed: while the tenant holds fewer, it is served before
    /// every tenant at or above its quota.
    #[serde(default)]
    pub quota: Option<u32>,
    /// The most GPUs the tenant may hold; a pod that would take it beyond
    /// waits.
    #[serde(default)]
    pub limit: Option<u32>,
    /// The tenant's share of the capacity beyond quotas, relative to the
    /// other tenants' weights.
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

impl Config {
    /// Parses and checks `config.json`; an empty string is the default. The
    /// error names the field and what to change.
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = parse_config(text)?;
        config
            .check()
            .map_err(|e| format!("invalid policy config.json: {e}"))?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        let positive = |w: f64| w.is_finite() && w > 0.0;
        if !positive(self.default_weight) {
            return Err(format!(
                "defaultWeight is {}; it must be a number greater than 0",
                self.default_weight
            ));
        }
        for (i, tenant) in self.tenants.iter().enumerate() {
            if tenant.name.is_empty() {
                return Err(format!(
                    "tenants[{i}].name is empty; give the tenant a name"
                ));
            }
            if let Some(j) = self.tenants[..i].iter().position(|t| t.name == tenant.name) {
                return Err(format!(
                    "tenants[{i}].name {:?} is also tenants[{j}].name; tenant names must be unique",
                    tenant.name
                ));
            }
            if !positive(tenant.weight) {
                return Err(format!(
                    "tenants[{i}].weight is {}; it must be a number greater than 0",
                    tenant.weight
                ));
            }
            if let (Some(quota), Some(limit)) = (tenant.quota, tenant.limit)
                && quota > limit
            {
                return Err(format!(
                    "tenants[{i}].quota {quota} is above tenants[{i}].limit {limit}; \
                     a tenant cannot be guaranteed more GPUs than it may hold"
                ));
            }
            if let Some(k) = tenant.namespaces.iter().position(String::is_empty) {
                return Err(format!(
                    "tenants[{i}].namespaces[{k}] is empty; give a namespace or a glob such as \"team-a-*\""
                ));
            }
        }
        Ok(())
    }

    /// The position in `tenants` of the first tenant whose namespaces match
    /// `namespace`.
    pub fn tenant_of(&self, namespace: &str) -> Option<usize> {
        self.tenants.iter().position(|t| {
            if t.namespaces.is_empty() {
                t.name == namespace
            } else {
                t.namespaces.iter().any(|glob| glob_match(glob, namespace))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_the_default_and_fields_are_camel_case() {
        assert_eq!(Config::parse(" ").unwrap(), Config::default());
        let config = Config::parse(
            r#"{"tenants": [{"name": "team-a", "namespaces": ["team-a", "team-a-*"],
                             "quota": 40, "limit": 48, "weight": 2},
                            {"name": "team-b"}],
                "defaultWeight": 0.5, "preferNvlink": false}"#,
        )
        .unwrap();
        assert_eq!(config.default_weight, 0.5);
        assert!(!config.prefer_nvlink);
        let a = &config.tenants[0];
        assert_eq!((a.quota, a.limit, a.weight), (Some(40), Some(48), 2.0));
        assert_eq!(config.tenants[1].weight, 1.0);
        assert_eq!(config.tenant_of("team-a"), Some(0));
        assert_eq!(config.tenant_of("team-a-dev"), Some(0));
        assert_eq!(
            config.tenant_of("team-b"),
            Some(1),
            "no namespaces: its name"
        );
        assert_eq!(config.tenant_of("team-ab"), None);
    }

    #[test]
    fn errors_name_the_field_and_the_fix() {
        for (text, expected) in [
            (r#"{"tenant": []}"#, "unknown field `tenant`"),
            (
                r#"{"tenants": [{"name": "a", "quta": 1}]}"#,
                "unknown field `quta`",
            ),
            (
                r#"{"tenants": [{"namespaces": ["a"]}]}"#,
                "missing field `name`",
            ),
            (
                r#"{"defaultWeight": 0}"#,
                "defaultWeight is 0; it must be a number greater than 0",
            ),
            (
                r#"{"tenants": [{"name": "a"}, {"name": "b", "weight": -1}]}"#,
                "tenants[1].weight is -1; it must be a number greater than 0",
            ),
            (r#"{"tenants": [{"name": ""}]}"#, "tenants[0].name is empty"),
            (
                r#"{"tenants": [{"name": "a"}, {"name": "a"}]}"#,
                "tenants[1].name \"a\" is also tenants[0].name",
            ),
            (
                r#"{"tenants": [{"name": "a", "quota": 9, "limit": 8}]}"#,
                "tenants[0].quota 9 is above tenants[0].limit 8",
            ),
            (
                r#"{"tenants": [{"name": "a", "namespaces": ["x", ""]}]}"#,
                "tenants[0].namespaces[1] is empty",
            ),
            (
                r#"{"tenants": [{"name": "a", "quota": -1}]}"#,
                "invalid value: integer `-1`",
            ),
        ] {
            let error = Config::parse(text).unwrap_err();
            assert!(error.starts_with("invalid policy config.json: "), "{error}");
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
