//! HTTPS: a certificate chain and its private key, read from PEM files and served through
//! rustls (TLS 1.2 and 1.3, HTTP/1.1 by ALPN). The pair sits behind a resolver that a reload
//! (SIGHUP) swaps whole: handshakes started after the swap use the new pair, connections
//! already open keep theirs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;

/// The PEM files a TLS listener serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The leaf's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The certificate and key served, swappable.
#[derive(Debug)]
pub struct Certificates {
    files: TlsFiles,
    current: ArcSwap<CertifiedKey>,
}

impl Certificates {
    /// Reads and checks the pair: a clear error names the file and what is wrong with it (no
    /// certificate, no key, a key that does not belong to the certificate).
    pub fn load(files: TlsFiles) -> Result<Arc<Certificates>, String> {
        let key = read_pair(&files)?;
        Ok(Arc::new(Certificates { files, current: ArcSwap::from_pointee(key) }))
    }

    /// Reads the files again; on success new handshakes use the new pair, on failure the old
    /// one is kept and the error returned.
    pub fn reload(&self) -> Result<(), String> {
        let key = read_pair(&self.files)?;
        self.current.store(Arc::new(key));
        Ok(())
    }

    /// The acceptor for a listener: TLS 1.2 and 1.3 with the ring provider's default
    /// cipher suites, no client certificates, HTTP/1.1 offered by ALPN.
    pub fn acceptor(self: &Arc<Self>) -> Result<tokio_rustls::TlsAcceptor, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("TLS configuration: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(Arc::clone(self))));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

/// Hands every handshake the pair current at its start.
#[derive(Debug)]
struct Resolver(Arc<Certificates>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current.load_full())
    }
}

fn read_pair(files: &TlsFiles) -> Result<CertifiedKey, String> {
    let chain = read_chain(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("--tls-key {}: no private key could be read ({e})", files.key.display()))?;
    let provider = rustls::crypto::ring::default_provider();
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("--tls-key {}: unusable private key ({e})", files.key.display()))?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|e| {
        format!(
            "--tls-key {} does not belong to the certificate in --tls-cert {} ({e})",
            files.key.display(),
            files.cert.display()
        )
    })?;
    Ok(certified)
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("--tls-cert {}: cannot be read ({e})", path.display()))?
        .collect();
    let certs = certs.map_err(|e| format!("--tls-cert {}: malformed PEM ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!("--tls-cert {}: no CERTIFICATE block found", path.display()));
    }
    Ok(certs)
}
