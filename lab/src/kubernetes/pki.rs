//! The certificates a Kubernetes control plane needs, made with rcgen into one directory:
//! a cluster CA, kube-apiserver's serving certificate, client certificates (the user is the
//! certificate's CN, its group the O entry: how kube-apiserver's x509 authenticator reads
//! them; rcgen writes one O per name, so one group per certificate), and the ServiceAccount
//! token signing key.
//!
//! ECDSA P-256 throughout: kube-apiserver, kube-controller-manager and client-go accept it for
//! serving, client and ServiceAccount keys, and it is generated in microseconds (RSA would take
//! a noticeable share of a test's start-up).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType,
};

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("making {what}: {source}")]
    Generate {
        what: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("{0}: not an IP address or DNS name for a certificate")]
    Host(String),
}

/// Who a client certificate authenticates as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The file stem: `<stem>.crt` and `<stem>.key`.
    pub stem: String,
    /// The user name (the CN).
    pub user: String,
    /// The group (the O), if any.
    pub group: Option<String>,
}

impl ClientIdentity {
    pub fn new(stem: &str, user: &str, group: Option<&str>) -> Self {
        Self {
            stem: stem.to_owned(),
            user: user.to_owned(),
            group: group.map(str::to_owned),
        }
    }

    /// The cluster administrator: `system:masters` may do anything, whatever RBAC says.
    pub fn admin() -> Self {
        Self::new("admin", "kubernetes-admin", Some("system:masters"))
    }
}

/// A directory of PEM files: `ca.crt`/`ca.key`, `apiserver.crt`/`apiserver.key`,
/// `sa.key`/`sa.pub`, and `<stem>.crt`/`<stem>.key` per client.
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
}

const CA_NAME: &str = "kube-ovn-rs lab CA";

impl Pki {
    /// Makes a new CA and ServiceAccount key in `dir`, a serving certificate for `hosts` (IP
    /// addresses or DNS names) and a client certificate per identity.
    pub fn create(dir: &Path, hosts: &[String], clients: &[ClientIdentity]) -> Result<Self, PkiError> {
        std::fs::create_dir_all(dir).map_err(|source| PkiError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let pki = Self { dir: dir.to_owned() };
        let ca_key = generate("the CA key")?;
        let ca_params = ca_params();
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .map_err(generating("the CA certificate"))?;
        pki.write("ca.crt", &ca_cert.pem())?;
        pki.write("ca.key", &ca_key.serialize_pem())?;
        let sa = generate("the ServiceAccount signing key")?;
        pki.write("sa.key", &sa.serialize_pem())?;
        pki.write("sa.pub", &sa.public_key_pem())?;
        pki.issue_serving(&ca_key, hosts)?;
        for client in clients {
            pki.issue_client_with(&ca_key, client)?;
        }
        Ok(pki)
    }

    /// An existing directory made by [`Pki::create`].
    pub fn open(dir: &Path) -> Self {
        Self { dir: dir.to_owned() }
    }

    /// Issues one more client certificate with the CA in the directory.
    pub fn issue_client(&self, client: &ClientIdentity) -> Result<(), PkiError> {
        let path = self.path("ca.key");
        let pem = std::fs::read_to_string(&path).map_err(|source| PkiError::Io {
            path: path.clone(),
            source,
        })?;
        let ca_key = KeyPair::from_pem(&pem).map_err(generating("the CA key from ca.key"))?;
        self.issue_client_with(&ca_key, client)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.path("ca.crt")
    }

    pub fn client_cert(&self, stem: &str) -> PathBuf {
        self.path(&format!("{stem}.crt"))
    }

    pub fn client_key(&self, stem: &str) -> PathBuf {
        self.path(&format!("{stem}.key"))
    }

    fn issue_serving(&self, ca_key: &KeyPair, hosts: &[String]) -> Result<(), PkiError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name("kube-apiserver", None);
        for host in hosts {
            params.subject_alt_names.push(match host.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(
                    host.clone()
                        .try_into()
                        .map_err(|_| PkiError::Host(host.clone()))?,
                ),
            });
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = generate("the serving key")?;
        let ca = ca_params();
        let cert = params
            .signed_by(&key, &Issuer::from_params(&ca, ca_key))
            .map_err(generating("the serving certificate"))?;
        self.write("apiserver.crt", &cert.pem())?;
        self.write("apiserver.key", &key.serialize_pem())
    }

    fn issue_client_with(&self, ca_key: &KeyPair, client: &ClientIdentity) -> Result<(), PkiError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(&client.user, client.group.as_deref());
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let what = format!("the client certificate of {}", client.user);
        let key = generate(&what)?;
        let ca = ca_params();
        let cert = params
            .signed_by(&key, &Issuer::from_params(&ca, ca_key))
            .map_err(generating(&what))?;
        self.write(&format!("{}.crt", client.stem), &cert.pem())?;
        self.write(&format!("{}.key", client.stem), &key.serialize_pem())
    }

    fn write(&self, file: &str, text: &str) -> Result<(), PkiError> {
        let path = self.path(file);
        std::fs::write(&path, text).map_err(|source| PkiError::Io { path, source })
    }
}

/// The CA's parameters: the same every time, so a CA key read back from `ca.key` signs
/// certificates whose issuer matches `ca.crt`.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(CA_NAME, None);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

fn generate(what: &str) -> Result<KeyPair, PkiError> {
    KeyPair::generate().map_err(generating(what))
}

fn generating(what: &str) -> impl Fn(rcgen::Error) -> PkiError + '_ {
    move |source| PkiError::Generate {
        what: what.to_owned(),
        source,
    }
}
