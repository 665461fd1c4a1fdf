//! Requests between API replicas that serve different tenants behind one Service.
//!
//! Every replica serves with a certificate from one shared CA, and holds a client certificate
//! from it in group [`REPLICAS_GROUP`]. A replica that gets a request for a tenant another
//! replica serves forwards it there ([`PeerClient::forward`]) with the client's own
//! certificate chain in [`FORWARDED_CERTIFICATES`]: the tenant's own replica authenticates the
//! client exactly as if it had connected directly (its client certificate against the tenant's
//! CA, its token against the tenant's key). Those headers are believed only on a connection
//! whose client certificate is a replica's ([`admit`]); anyone else's are dropped.
//!
//! Ordinary requests share one HTTP/2 connection per peer; a request that upgrades its
//! connection (a pod's exec, attach or port-forward streams) gets an HTTP/1.1 connection of
//! its own, whose upgraded bytes are relayed both ways.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::access::PeerCertificates;
use crate::status::ApiError;
use crate::tls::TlsError;

/// The group of replicas' client certificates.
pub const REPLICAS_GROUP: &str = "carrel:replicas";

/// The certificate chain the client presented to the replica that forwarded its request:
/// base64 DER certificates, comma separated; empty when it presented none.
pub const FORWARDED_CERTIFICATES: HeaderName =
    HeaderName::from_static("x-carrel-forwarded-certificates");

/// The replica that forwarded a request.
pub const FORWARDED_BY: HeaderName = HeaderName::from_static("x-carrel-forwarded-by");

/// Put in a request that another replica forwarded: the replica's name. Such a request is never
/// forwarded again.
#[derive(Clone, Debug)]
pub struct FromReplica(pub String);

/// What can go wrong reaching a peer.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The connection could not be made.
    #[error("connecting to replica at {address}: {source}")]
    Connect {
        /// Where.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("replica at {address}: {source}")]
    Http {
        /// Where.
        address: String,
        /// Why.
        source: hyper::Error,
    },
    /// The peer answered with an error.
    #[error("replica at {address} answered {status}: {body}")]
    Refused {
        /// Where.
        address: String,
        /// Its status.
        status: StatusCode,
        /// Its body.
        body: String,
    },
    /// The address is not HOST:PORT.
    #[error("{0} is not HOST:PORT")]
    Address(String),
}

/// Which replica, if any, sent `request` over this connection: its client certificate chains to
/// `ca` and is in [`REPLICAS_GROUP`]. Then the client certificates it forwarded stand in for the
/// connection's, and the request is marked [`FromReplica`]; otherwise whatever forwarding
/// headers it carries are dropped, so that no client can claim another's certificate.
pub fn admit(request: &mut Request, ca: Option<&CertificateDer<'static>>) {
    // Every request a replica sends names it: no other request costs a certificate check.
    if !request.headers().contains_key(FORWARDED_BY) {
        request.headers_mut().remove(FORWARDED_CERTIFICATES);
        return;
    }
    let replica = ca.and_then(|ca| {
        let peer = request.extensions().get::<PeerCertificates>()?;
        let user = peer.user_for(ca, UnixTime::now()).ok()?;
        user.in_group(REPLICAS_GROUP).then_some(user.name)
    });
    let headers = request.headers_mut();
    let forwarded = headers.remove(FORWARDED_CERTIFICATES);
    headers.remove(FORWARDED_BY);
    let Some(replica) = replica else { return };
    let chain = forwarded
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            let decode = |c: &str| base64::engine::general_purpose::STANDARD.decode(c.trim()).ok();
            v.split(',').filter(|c| !c.trim().is_empty()).filter_map(decode).collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let chain = chain.into_iter().map(CertificateDer::from).collect();
    request.extensions_mut().insert(PeerCertificates::new(chain));
    request.extensions_mut().insert(FromReplica(replica));
}

/// A replica's client of the others.
#[derive(Debug)]
pub struct PeerClient {
    me: String,
    /// Offering HTTP/2, for the shared connections.
    h2: Arc<rustls::ClientConfig>,
    /// Offering HTTP/1.1, for upgrades.
    h1: Arc<rustls::ClientConfig>,
    connections: Mutex<HashMap<String, hyper::client::conn::http2::SendRequest<Body>>>,
}

impl PeerClient {
    /// Replica `me`'s client: it trusts servers whose certificate chains to `ca_pem` and
    /// presents `cert_pem` (a certificate in [`REPLICAS_GROUP`] from the same CA) with its key.
    pub fn new(
        me: &str,
        ca_pem: &str,
        cert_pem: &str,
        key_pem: &str,
    ) -> Result<PeerClient, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert?)?;
        }
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<_, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = |alpn: &[u8]| -> Result<Arc<rustls::ClientConfig>, TlsError> {
            let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots.clone())
                .with_client_auth_cert(chain.clone(), key.clone_key())?;
            config.alpn_protocols = vec![alpn.to_vec()];
            Ok(Arc::new(config))
        };
        Ok(PeerClient {
            me: me.to_owned(),
            h2: config(b"h2")?,
            h1: config(b"http/1.1")?,
            connections: Mutex::default(),
        })
    }

    async fn tls(
        &self,
        address: &str,
        config: Arc<rustls::ClientConfig>,
    ) -> Result<TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>, PeerError> {
        let connect = |source| PeerError::Connect { address: address.to_owned(), source };
        let (host, _) = address.rsplit_once(':').ok_or(PeerError::Address(address.into()))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| PeerError::Address(address.to_owned()))?;
        let tcp = tokio::net::TcpStream::connect(address).await.map_err(connect)?;
        tcp.set_nodelay(true).map_err(connect)?;
        let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await;
        Ok(TokioIo::new(tls.map_err(connect)?))
    }

    /// The shared HTTP/2 connection to `address`, made when there is none or it has closed.
    async fn sender(
        &self,
        address: &str,
    ) -> Result<hyper::client::conn::http2::SendRequest<Body>, PeerError> {
        if let Some(sender) = self.connections.lock().get(address) {
            if !sender.is_closed() {
                return Ok(sender.clone());
            }
        }
        let io = self.tls(address, self.h2.clone()).await?;
        let (sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|source| PeerError::Http { address: address.to_owned(), source })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a connection to a replica ended");
            }
        });
        self.connections.lock().insert(address.to_owned(), sender.clone());
        Ok(sender)
    }

    /// Send `request` (a client's, for a tenant replica `address` serves) there and answer with
    /// what it answers; an upgrade is relayed both ways once both sides have switched.
    pub async fn forward(&self, address: &str, mut request: Request) -> Response {
        let chain = request
            .extensions()
            .get::<PeerCertificates>()
            .map(|p| {
                let encode = |c: &CertificateDer<'_>| {
                    base64::engine::general_purpose::STANDARD.encode(c.as_ref())
                };
                p.chain().iter().map(encode).collect::<Vec<_>>().join(",")
            })
            .unwrap_or_default();
        let headers = request.headers_mut();
        if let Ok(value) = HeaderValue::from_str(&chain) {
            headers.insert(FORWARDED_CERTIFICATES, value);
        }
        if let Ok(value) = HeaderValue::from_str(&self.me) {
            headers.insert(FORWARDED_BY, value);
        }
        let upgrade = request.headers().contains_key(header::UPGRADE);
        let answered = if upgrade {
            self.forward_upgrade(address, request).await
        } else {
            self.forward_plain(address, request).await
        };
        answered.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "forwarding a request to its tenant's replica failed");
            // The replica may be restarting: clients retry after a second.
            ApiError::ServiceUnavailable { message: e.to_string(), retry_after: Some(1) }
                .into_response()
        })
    }

    async fn forward_plain(&self, address: &str, request: Request) -> Result<Response, PeerError> {
        let (mut parts, body) = request.into_parts();
        // HTTP/2 carries the authority in the URI; hop-by-hop headers it does not allow.
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        parts.uri = format!("https://{address}{path}")
            .parse()
            .map_err(|_| PeerError::Address(address.to_owned()))?;
        parts.version = axum::http::Version::HTTP_2;
        for hop in [header::CONNECTION, header::HOST, header::TRANSFER_ENCODING, header::TE] {
            parts.headers.remove(hop);
        }
        parts.headers.remove("keep-alive");
        parts.headers.remove("proxy-connection");
        let mut sender = self.sender(address).await?;
        let http = |source| PeerError::Http { address: address.to_owned(), source };
        let response = sender.send_request(Request::from_parts(parts, body)).await.map_err(http)?;
        let (parts, body) = response.into_parts();
        Ok(Response::from_parts(parts, Body::new(body)))
    }

    async fn forward_upgrade(
        &self,
        address: &str,
        mut request: Request,
    ) -> Result<Response, PeerError> {
        let client_side = hyper::upgrade::on(&mut request);
        let io = self.tls(address, self.h1.clone()).await?;
        let http = |source| PeerError::Http { address: address.to_owned(), source };
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(io).await.map_err(http)?;
        tokio::spawn(async move {
            if let Err(e) = connection.with_upgrades().await {
                tracing::debug!(error = %e, "an upgraded connection to a replica ended");
            }
        });
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        parts.uri = path.parse().map_err(|_| PeerError::Address(address.to_owned()))?;
        parts.version = axum::http::Version::HTTP_11;
        let mut response =
            sender.send_request(Request::from_parts(parts, body)).await.map_err(http)?;
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let peer_side = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                let (client, peer) = match tokio::try_join!(client_side, peer_side) {
                    Ok(both) => both,
                    Err(e) => {
                        tracing::debug!(error = %e, "an upgrade through a replica failed");
                        return;
                    }
                };
                let (mut client, mut peer) = (TokioIo::new(client), TokioIo::new(peer));
                let _ = tokio::io::copy_bidirectional(&mut client, &mut peer).await;
            });
        }
        let (parts, body) = response.into_parts();
        Ok(Response::from_parts(parts, Body::new(body)))
    }

    /// Send `body` (of `content_type`, streamed) with `method` to `path` on replica `address`,
    /// as this replica: the body of its answer, which must be a success.
    pub async fn call(
        &self,
        method: axum::http::Method,
        address: &str,
        path: &str,
        content_type: &str,
        body: Body,
    ) -> Result<bytes::Bytes, PeerError> {
        use http_body_util::BodyExt as _;
        let request = Request::builder()
            .method(method)
            .uri(format!("https://{address}{path}"))
            .header(header::CONTENT_TYPE, content_type)
            .header(FORWARDED_BY, &self.me)
            .body(body)
            .map_err(|_| PeerError::Address(address.to_owned()))?;
        let mut sender = self.sender(address).await?;
        let http = |source| PeerError::Http { address: address.to_owned(), source };
        let response = sender.send_request(request).await.map_err(http)?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(http)?.to_bytes();
        if status.is_success() {
            return Ok(body);
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        Err(PeerError::Refused { address: address.to_owned(), status, body })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::Ca;

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    /// A request whose connection presented `chain`, claiming `forwarded` was the client's.
    fn request(chain: Vec<CertificateDer<'static>>, forwarded: &CertificateDer<'_>) -> Request {
        let mut request = Request::new(Body::empty());
        request.extensions_mut().insert(PeerCertificates::new(chain));
        let encoded = base64::engine::general_purpose::STANDARD.encode(forwarded.as_ref());
        let headers = request.headers_mut();
        headers.insert(FORWARDED_CERTIFICATES, HeaderValue::from_str(&encoded).unwrap());
        headers.insert(FORWARDED_BY, HeaderValue::from_static("r1"));
        request
    }

    fn presented(request: &Request) -> Vec<CertificateDer<'static>> {
        request.extensions().get::<PeerCertificates>().unwrap().chain().to_vec()
    }

    #[test]
    fn only_a_replicas_connection_may_forward_a_clients_certificate() {
        let ca = Ca::generate().unwrap();
        let ca_der = der(&ca.cert_pem);
        let client = der(&ca.client("alice", "team").unwrap().0);
        let replica = der(&ca.client("carrel-replica:r1", REPLICAS_GROUP).unwrap().0);

        // A replica's connection: the forwarded certificate stands in for the connection's.
        let mut from_replica = request(vec![replica.clone()], &client);
        admit(&mut from_replica, Some(&ca_der));
        assert_eq!(presented(&from_replica), vec![client.clone()]);
        let by = from_replica.extensions().get::<FromReplica>().unwrap();
        assert_eq!(by.0, "carrel-replica:r1");
        assert!(!from_replica.headers().contains_key(FORWARDED_CERTIFICATES));

        // A client of the same CA outside the replicas' group, another CA's replica, or no
        // replicas at all: the headers are dropped, the connection's own certificate stays.
        let other = Ca::generate().unwrap();
        let foreign = der(&other.client("carrel-replica:r9", REPLICAS_GROUP).unwrap().0);
        for (chain, ca) in [
            (vec![client.clone()], Some(&ca_der)),
            (vec![foreign.clone()], Some(&ca_der)),
            (vec![replica.clone()], None),
            (vec![], Some(&ca_der)),
        ] {
            let mut claimed = request(chain.clone(), &replica);
            admit(&mut claimed, ca);
            assert_eq!(presented(&claimed), chain);
            assert!(claimed.extensions().get::<FromReplica>().is_none());
            assert!(!claimed.headers().contains_key(FORWARDED_CERTIFICATES));
            assert!(!claimed.headers().contains_key(FORWARDED_BY));
        }
    }
}
