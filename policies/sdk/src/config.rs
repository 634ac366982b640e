//! Policy parameters: the `config.json` shipped with a policy arrives verbatim
//! in `Snapshot::config`.

use serde::de::DeserializeOwned;

/// Parses the snapshot's config string into `T`; an empty (or all-whitespace)
/// string gives `T::default()`. The error names the problem so the policy can
/// report it, e.g. in a `wait` reason.
pub fn parse_config<T: DeserializeOwned + Default>(config: &str) -> Result<T, String> {
    if config.trim().is_empty() {
        return Ok(T::default());
    }
    serde_json::from_str(config).map_err(|e| format!("invalid policy config.json: {e}"))
}

#[cfg(test)]
mod tests {
    use super::parse_config;

    #[derive(serde::Deserialize, Default, Debug, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields, default)]
    struct Params {
        prefer_nvlink: bool,
    }

    #[test]
    fn empty_is_default_and_errors_name_the_field() {
        assert_eq!(parse_config::<Params>("  ").unwrap(), Params::default());
        assert!(
            parse_config::<Params>(r#"{"preferNvlink": true}"#)
                .unwrap()
                .prefer_nvlink
        );
        let err = parse_config::<Params>(r#"{"preferNVLink": true}"#).unwrap_err();
        assert!(err.contains("preferNVLink"), "{err}");
    }
}
