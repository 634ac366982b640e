//! How to talk to a registry: credentials, trust, transport.

use std::fmt;
use std::time::Duration;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;

use crate::error::{BoxError, OciError};
use crate::reference::ComponentRef;

/// How to talk to a registry: credentials, trust, transport.
#[derive(Clone, Default)]
pub struct Access {
    /// Basic credentials (user, password); none: anonymous.
    pub credentials: Option<(String, String)>,
    /// PEM bundles of CAs to trust besides the system's.
    pub ca_pem: Vec<Vec<u8>>,
    /// Plain HTTP instead of HTTPS (a local registry without TLS).
    pub plain_http: bool,
    /// Connect and read timeout.
    pub timeout: Option<Duration>,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("ca_bundles", &self.ca_pem.len())
            .field("plain_http", &self.plain_http)
            .finish()
    }
}

/// The default connect and read timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl Access {
    pub(crate) fn auth(&self) -> RegistryAuth {
        match &self.credentials {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    pub(crate) fn client(&self, reference: &ComponentRef) -> Result<oci_client::Client, OciError> {
        // reqwest is built without a crypto provider of its own: use ring,
        // as the Kubernetes client does (a second install is a no-op).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = Vec::new();
        for (i, pem) in self.ca_pem.iter().enumerate() {
            check_pem(pem, &format!("#{}", i + 1))?;
            roots.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.clone(),
            });
        }
        let timeout = self.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let config = ClientConfig {
            protocol: if self.plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            extra_root_certificates: roots,
            // A component artifact is a manifest, never an index.
            platform_resolver: None,
            connect_timeout: Some(timeout),
            read_timeout: Some(timeout),
            user_agent: concat!("wasmgpu/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        oci_client::Client::try_from(config).map_err(|e| OciError::Registry {
            reference: reference.to_string(),
            source: Box::new(e),
        })
    }
}

/// Checks that `pem` holds at least one certificate.
pub fn check_pem(pem: &[u8], origin: &str) -> Result<(), OciError> {
    let text = String::from_utf8_lossy(pem);
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(OciError::Ca {
            origin: origin.to_string(),
            source: "no -----BEGIN CERTIFICATE----- block".into(),
        });
    }
    certificate_check(pem).map_err(|source| OciError::Ca {
        origin: origin.to_string(),
        source,
    })
}

fn certificate_check(pem: &[u8]) -> Result<(), BoxError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem).collect::<Result<_, _>>()?;
    if certs.is_empty() {
        return Err("no certificate in it".into());
    }
    Ok(())
}
