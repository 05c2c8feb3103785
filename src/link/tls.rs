//! Mutual TLS 1.3 for peer links, authenticated by the hosts' ed25519 keys.
//!
//! Owns the QUIC endpoint's crypto: a self-signed ed25519 certificate made from the host key
//! (rcgen), verifiers that pin the configured peer keys and really check the handshake signature
//! (a replayed certificate without its private key fails there), ALPN `fleetd/1`, TLS 1.3 only,
//! no 0-RTT, and a stateless-reset key derived from the host key (so a restarted peer's resets are
//! recognised at once). Must never accept a key that is not configured, and never skip
//! `verify_tls13_signature`.

use std::sync::Arc;

use ed25519_dalek::pkcs8::EncodePrivateKey;
use ed25519_dalek::{SigningKey, VerifyingKey};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use sha2::Digest;

/// The ALPN protocol of peer links.
pub const ALPN: &[u8] = b"fleetd/1";
/// The name every host's certificate carries (identity is the key, never the name).
pub const SERVER_NAME: &str = "fleetd";

/// The DER prefix of an ed25519 SubjectPublicKeyInfo (RFC 8410); the 32 key bytes follow.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the host certificate could not be made: {0}")]
    Cert(String),
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The ed25519 key a certificate carries, if it carries one.
pub fn cert_key(cert: &CertificateDer<'_>) -> Option<VerifyingKey> {
    let parsed = rustls::server::ParsedCertificate::try_from(cert).ok()?;
    let spki = parsed.subject_public_key_info();
    let der: &[u8] = spki.as_ref();
    let raw = der.strip_prefix(&ED25519_SPKI_PREFIX[..])?;
    let raw: [u8; 32] = raw.try_into().ok()?;
    VerifyingKey::from_bytes(&raw).ok()
}

/// The host's self-signed certificate and its private key, from the host key.
pub fn host_cert(
    key: &SigningKey,
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), TlsError> {
    let der = key
        .to_pkcs8_der()
        .map_err(|e| TlsError::Cert(e.to_string()))?;
    let pkcs8 = PrivatePkcs8KeyDer::from(der.as_bytes().to_vec());
    let kp = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &rcgen::PKCS_ED25519)
        .map_err(|e| TlsError::Cert(e.to_string()))?;
    let params = rcgen::CertificateParams::new(vec![SERVER_NAME.to_string()])
        .map_err(|e| TlsError::Cert(e.to_string()))?;
    let cert = params
        .self_signed(&kp)
        .map_err(|e| TlsError::Cert(e.to_string()))?;
    Ok((cert.der().clone(), PrivateKeyDer::Pkcs8(pkcs8)))
}

/// The stateless-reset key: derived from the host key, so it survives restarts.
pub fn reset_key(key: &SigningKey) -> ring::hmac::Key {
    let mut h = sha2::Sha256::new();
    h.update(b"fleetd/1 stateless reset\n");
    h.update(key.to_bytes());
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &h.finalize())
}

/// The key of the connection-ID generator: derived from the host key too, so a restarted host
/// recognises the IDs it issued before (quinn's default picks a random key per process, and
/// then drops the old peer's packets as "invalid CID" instead of answering with a reset).
pub fn cid_key(key: &SigningKey) -> u64 {
    let mut h = sha2::Sha256::new();
    h.update(b"fleetd/1 connection ids\n");
    h.update(key.to_bytes());
    let d = h.finalize();
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

fn check_pinned(
    cert: &CertificateDer<'_>,
    allowed: &[VerifyingKey],
) -> Result<VerifyingKey, rustls::Error> {
    let k = cert_key(cert)
        .ok_or_else(|| rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))?;
    if allowed.contains(&k) {
        Ok(k)
    } else {
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::ApplicationVerificationFailure,
        ))
    }
}

fn tls13_only(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
    allowed: &[VerifyingKey],
) -> Result<HandshakeSignatureValid, rustls::Error> {
    // The certificate was pinned already; check again (cheap) and then the signature that
    // proves the peer holds the private key.
    check_pinned(cert, allowed)?;
    rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
}

/// The client side: accepts exactly one server key (the peer being dialled).
#[derive(Debug)]
struct PinnedServer {
    key: VerifyingKey,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        check_pinned(end_entity, std::slice::from_ref(&self.key))?;
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::Tls13RequiredForQuic,
        ))
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        tls13_only(
            message,
            cert,
            dss,
            &self.algs,
            std::slice::from_ref(&self.key),
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

/// The server side: a client must present one of the configured peers' keys.
#[derive(Debug)]
struct PinnedClients {
    keys: Vec<VerifyingKey>,
    algs: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for PinnedClients {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }
    fn client_auth_mandatory(&self) -> bool {
        true
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        check_pinned(end_entity, &self.keys)?;
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::Tls13RequiredForQuic,
        ))
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        tls13_only(message, cert, dss, &self.algs, &self.keys)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

/// rustls config for accepting links from `peers` (TLS 1.3, client certificates required).
pub fn server_config(
    key: &SigningKey,
    peers: Vec<VerifyingKey>,
) -> Result<rustls::ServerConfig, TlsError> {
    let p = provider();
    let algs = p.signature_verification_algorithms;
    let (cert, private) = host_cert(key)?;
    let mut c = rustls::ServerConfig::builder_with_provider(p)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_client_cert_verifier(Arc::new(PinnedClients { keys: peers, algs }))
        .with_single_cert(vec![cert], private)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    c.alpn_protocols = vec![ALPN.to_vec()];
    c.max_early_data_size = 0;
    Ok(c)
}

/// rustls config for dialling the peer whose key is `peer` (and only it).
pub fn client_config(
    key: &SigningKey,
    peer: VerifyingKey,
) -> Result<rustls::ClientConfig, TlsError> {
    let p = provider();
    let algs = p.signature_verification_algorithms;
    let (cert, private) = host_cert(key)?;
    let mut c = rustls::ClientConfig::builder_with_provider(p)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedServer { key: peer, algs }))
        .with_client_auth_cert(vec![cert], private)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    c.alpn_protocols = vec![ALPN.to_vec()];
    c.enable_early_data = false;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_carries_the_host_key() {
        let k = SigningKey::from_bytes(&[9u8; 32]);
        let (cert, _) = host_cert(&k).unwrap();
        assert_eq!(cert_key(&cert), Some(k.verifying_key()));
    }

    #[test]
    fn the_reset_key_is_stable_per_host_key() {
        let k = SigningKey::from_bytes(&[9u8; 32]);
        let tag = |key: &ring::hmac::Key| ring::hmac::sign(key, b"x").as_ref().to_vec();
        assert_eq!(tag(&reset_key(&k)), tag(&reset_key(&k)));
        let other = SigningKey::from_bytes(&[8u8; 32]);
        assert_ne!(tag(&reset_key(&k)), tag(&reset_key(&other)));
    }
}
